// One rank of the distributed tests (dist_test.cpp starts 2 or 4 of these): Gloo over a c10d
// FileStore, a GradScaler with mixprec::distributed's reducer, injected inf/NaN. Writes what it
// saw to <dir>/rank<r>.out (or the error to <dir>/rank<r>.err) for the driver to compare.
#include <mixprec/distributed.h>
#include <mixprec/grad_scaler.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using mixprec::distributed::ProcessGroupPtr;

struct Args {
  std::string scenario;  // skip | ddp | groups | die | stall
  std::string reducer = "world";  // world | none | dp (groups: only the first group)
  std::string dir;
  int rank = 0;
  int world = 1;
  int steps = 8;
  int timeout_ms = 20000;
};

Args parse(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i + 1 < argc; i += 2) kv[argv[i]] = argv[i + 1];
  Args a;
  a.scenario = kv["--scenario"];
  a.dir = kv["--dir"];
  if (kv.count("--reducer")) a.reducer = kv["--reducer"];
  a.rank = std::atoi(kv["--rank"].c_str());
  a.world = std::atoi(kv["--world"].c_str());
  if (kv.count("--steps")) a.steps = std::atoi(kv["--steps"].c_str());
  if (kv.count("--timeout-ms")) a.timeout_ms = std::atoi(kv["--timeout-ms"].c_str());
  return a;
}

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path + ".tmp");
  out << text;
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());  // the driver never reads half a file
}

// The same model on every rank (same seed); the data differ per rank.
struct Trainer {
  torch::nn::Linear model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  mixprec::GradScaler scaler;
  torch::Tensor x, y;

  explicit Trainer(int rank)
      : scaler(mixprec::GradScalerOptions().init_scale(1024.0).growth_interval(2)) {
    torch::manual_seed(0);
    model = torch::nn::Linear(4, 1);
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(),
                                                    torch::optim::SGDOptions(0.05));
    torch::manual_seed(100 + rank);
    x = torch::randn({16, 4});
    y = x.sum(1, true) * 0.5 + 1.0;
  }

  void backward() {
    optimizer->zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    scaler.scale(loss).backward();
  }

  void poison(double value) { model->weight.grad().view(-1)[1].fill_(value); }

  std::string record(int step) {
    std::ostringstream line;
    line << "step " << step << " applied " << scaler.last_step_applied(*optimizer) << " scale "
         << hex(scaler.get_scale()) << "\n";
    return line.str();
  }

  std::string params() {
    std::ostringstream out;
    for (const auto& p : model->parameters()) {
      const torch::Tensor flat = p.detach().contiguous().view(-1);
      out << "param";
      for (int64_t i = 0; i < flat.numel(); ++i) out << " " << hex(flat[i].item<float>());
      out << "\n";
    }
    return out.str();
  }
};

// Gradients averaged over the world with c10d, as DDP does (on the scaled gradients).
void all_reduce_gradients(const ProcessGroupPtr& world, Trainer& t, int world_size) {
  for (auto& p : t.model->parameters()) {
    std::vector<torch::Tensor> grads{p.grad()};
    world->allreduce(grads)->wait();
    p.grad().div_(world_size);
  }
}

int run(const Args& a) {
  torch::set_num_threads(1);
  const auto timeout = std::chrono::milliseconds(a.timeout_ms);
  auto store = c10::make_intrusive<c10d::FileStore>(a.dir + "/store", a.world);
  ProcessGroupPtr world =
      mixprec::distributed::make_gloo_process_group(store, a.rank, a.world, timeout);
  // Gloo's rendezvous can return on one rank before a peer has finished it: a rank that then
  // trains without a collective (reducer "none") and exits closes its sockets under a peer still
  // connecting ("Gloo connectFullMesh failed ... Connection closed by peer", seen under load in
  // WithoutReducerRanksDisagree). A barrier first: every group is whole on every rank.
  world->barrier()->wait();
  Trainer t(a.rank);
  std::vector<ProcessGroupPtr> groups{world};

  if (a.scenario == "groups") {
    // 2 x 2 ranks: a data-parallel pair {0,1} / {2,3} and a pipeline pair {0,2} / {1,3}.
    auto dp_store = c10::make_intrusive<c10d::PrefixStore>("dp" + std::to_string(a.rank / 2), store);
    auto pp_store = c10::make_intrusive<c10d::PrefixStore>("pp" + std::to_string(a.rank % 2), store);
    auto dp = mixprec::distributed::make_gloo_process_group(dp_store, a.rank % 2, 2, timeout);
    auto pp = mixprec::distributed::make_gloo_process_group(pp_store, a.rank / 2, 2, timeout);
    // The same barrier over each subgroup (the "dp" reducer never uses pp).
    dp->barrier()->wait();
    pp->barrier()->wait();
    groups = a.reducer == "dp" ? std::vector<ProcessGroupPtr>{dp}
                               : std::vector<ProcessGroupPtr>{dp, pp};
  }
  if (a.reducer != "none") t.scaler.set_found_inf_reducer(mixprec::distributed::found_inf_reducer(groups));

  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string out;
  for (int step = 0; step < a.steps; ++step) {
    if (step == 2 && a.rank == 1 && a.scenario == "die") {
      std::_Exit(3);  // dies between collectives, holding its peers' sockets until exit
    }
    if (step == 2 && a.rank == 1 && a.scenario == "stall") {
      std::this_thread::sleep_for(timeout * 10);  // alive but silent; the driver kills it
      std::_Exit(4);
    }
    t.backward();
    if (a.scenario == "skip" && a.rank == a.world - 1 && (step == 2 || step == 5)) t.poison(inf);
    if (a.scenario == "groups" && a.rank == 3 && step == 1) t.poison(inf);
    if (a.scenario == "ddp") {
      // Before the all-reduce an inf reaches every rank anyway; after it only this rank sees it
      // (as with a rank-local gradient transform), and only the reducer keeps the ranks in step.
      if (a.rank == a.world - 1 && step == 3) t.poison(inf);
      all_reduce_gradients(world, t, a.world);
      if (a.rank == a.world - 1 && step == 7) t.poison(inf);
      if (a.rank == 0 && step == 11) t.poison(nan);
    }
    t.scaler.step(*t.optimizer);
    t.scaler.update();
    out += t.record(step);
  }
  out += t.params();
  write_file(a.dir + "/rank" + std::to_string(a.rank) + ".out", out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return run(a);
  } catch (const c10::Error& e) {
    write_file(a.dir + "/rank" + std::to_string(a.rank) + ".err", e.what_without_backtrace());
    // Skip destructors: a process group whose peer died may wait on it while shutting down.
    std::_Exit(2);
  } catch (const std::exception& e) {
    write_file(a.dir + "/rank" + std::to_string(a.rank) + ".err", e.what());
    // Skip destructors: a process group whose peer died may wait on it while shutting down.
    std::_Exit(2);
  }
}
