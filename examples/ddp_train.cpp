// Data-parallel training with mixprec's GradScaler on c10d: gradients averaged with all-reduce,
// one overflow decision for all ranks. Launched like torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; LOCAL_RANK for NCCL): examples/launch_ddp.sh starts N ranks; see docs/distributed.md.
#include <mixprec/distributed.h>
#include <mixprec/mixprec.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int env_int(const char* name, int fallback) {
  return std::stoi(env_or(name, std::to_string(fallback)));
}

struct Config {
  int rank = 0;
  int world = 1;
  int steps = 200;
  int inject_step = 50;  // this step, the last rank alone sees an inf (after the all-reduce)
  torch::Device device = torch::kCPU;
};

// Group is c10d::ProcessGroup, or c10d::Backend for NCCL on LibTorch 2.x: both have allreduce().
template <typename Group>
int train(const c10::intrusive_ptr<Group>& group, mixprec::GradScaler::FoundInfReducer reducer,
          const Config& cfg) {
  // The same initial model on every rank (DDP broadcasts rank 0's instead).
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::ReLU(),
                              torch::nn::Linear(32, 1));
  model->to(cfg.device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().growth_interval(20));
  // The one line that makes all ranks skip together (see Note in docs/distributed.md).
  scaler.set_found_inf_reducer(std::move(reducer));

  // Each rank trains on its own shard of one synthetic data set.
  torch::manual_seed(1234);
  const torch::Tensor w_true = torch::randn({16, 1});
  const torch::Tensor x_all = torch::randn({64 * cfg.world, 16});
  const torch::Tensor y_all = x_all.mm(w_true) + 0.1 * torch::randn({64 * cfg.world, 1});
  const torch::Tensor x = x_all.slice(0, 64 * cfg.rank, 64 * (cfg.rank + 1)).to(cfg.device);
  const torch::Tensor y = y_all.slice(0, 64 * cfg.rank, 64 * (cfg.rank + 1)).to(cfg.device);

  for (int step = 0; step < cfg.steps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      // fp16 autocast on CUDA; on the CPU this example trains in fp32 (the scaler still works).
      std::optional<mixprec::AutocastGuard> autocast;
      if (cfg.device.is_cuda()) autocast.emplace(torch::kCUDA);
      loss = torch::mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    // DDP's gradient averaging, on the scaled gradients (an inf here reaches every rank anyway).
    for (auto& p : model->parameters()) {
      std::vector<torch::Tensor> grad{p.grad()};
      group->allreduce(grad)->wait();
      p.grad().div_(cfg.world);
    }
    // A rank-local overflow after the all-reduce (e.g. a rank-local gradient transform, or a
    // tensor-parallel shard): without the reducer only this rank would skip, and the ranks' models
    // would silently part.
    if (step == cfg.inject_step && cfg.rank == cfg.world - 1) {
      model->parameters()[0].grad().view(-1)[0].fill_(std::numeric_limits<float>::infinity());
    }
    scaler.step(optimizer);
    scaler.update();
    if (cfg.rank == 0 && (step % 20 == 0 || step == cfg.inject_step || step == cfg.steps - 1)) {
      std::cout << "step " << step << "  loss " << loss.item<double>() << "  scale "
                << scaler.get_scale() << (scaler.last_step_applied(optimizer) ? "" : "  (skipped)")
                << std::endl;
    }
  }

  // Check: the parameters are bit-identical on all ranks (max == -max(-x) over the world).
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape(-1));
  const torch::Tensor mine = torch::cat(flat);
  std::vector<torch::Tensor> hi{mine.clone()};
  std::vector<torch::Tensor> lo{-mine};
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  group->allreduce(hi, max_op)->wait();
  group->allreduce(lo, max_op)->wait();
  const bool identical = hi[0].equal(-lo[0]);
  if (cfg.rank == 0) {
    std::cout << (identical ? "parameters identical on all " : "PARAMETERS DIFFER across ")
              << cfg.world << " ranks" << std::endl;
  }
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  cfg.rank = env_int("RANK", 0);
  cfg.world = env_int("WORLD_SIZE", 1);
  if (argc > 1) cfg.steps = std::atoi(argv[1]);
  if (argc > 2) cfg.inject_step = std::atoi(argv[2]);
  const std::string backend = env_or("MIXPREC_BACKEND", "gloo");
  const auto timeout = std::chrono::seconds(env_int("MIXPREC_TIMEOUT_S", 60));
  try {
    // Rank 0 serves the TCPStore at MASTER_ADDR:MASTER_PORT and the others connect to it, unless
    // torchrun's agent already serves one there (it says so as torch.distributed reads it).
    const bool agent_store = env_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env_int("MASTER_PORT", 29500));
    store_options.isServer = cfg.rank == 0 && !agent_store;
    store_options.numWorkers = cfg.world;
    store_options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(env_or("MASTER_ADDR", "127.0.0.1"),
                                                     store_options);
#ifdef USE_C10D_NCCL
    if (backend == "nccl") {
      cfg.device = torch::Device(torch::kCUDA, env_int("LOCAL_RANK", 0));
      c10::cuda::set_device(cfg.device.index());
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, cfg.rank, cfg.world, options);
#if MIXPREC_TORCH_2
      // LibTorch 2.x: ProcessGroupNCCL is a c10d::Backend, not a c10d::ProcessGroup.
      return train(nccl, mixprec::distributed::found_inf_reducer_for_backends({nccl}), cfg);
#else
      return train(nccl, mixprec::distributed::found_inf_reducer(nccl), cfg);
#endif
    }
#endif
    TORCH_CHECK(backend == "gloo", "ddp_train: MIXPREC_BACKEND must be gloo (or nccl with a CUDA "
                "LibTorch), got ", backend);
    // Gloo binds to GLOO_HOSTNAME: this machine's address as the other machines reach it.
    auto gloo = mixprec::distributed::make_gloo_process_group(
        store, cfg.rank, cfg.world, timeout, env_or("GLOO_HOSTNAME", "127.0.0.1"));
    return train(gloo, mixprec::distributed::found_inf_reducer(gloo), cfg);
  } catch (const c10::Error& e) {
    std::cerr << "rank " << cfg.rank << ": " << e.what_without_backtrace() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << cfg.rank << ": " << e.what() << std::endl;
    return 1;
  }
}
