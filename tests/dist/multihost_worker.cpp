// One rank of the multi-host clipping tests (multihost_test.cpp starts 3 of these, each in its own
// network namespace with its own IP address): the ranks meet over a c10d TCPStore served by rank
// 0 at its address, and reduce over Gloo bound to their own address. Each rank owns a different
// shard of the parameters (shard r: its own tensors, of sizes that differ per rank) and a
// replicated trunk whose gradients are averaged as DDP does. Scenarios:
//   scaler  GradScaler + set_grad_norm_reducer + clip_grad_norm_ on the shard's optimizer
//           (mixprec::optim::AdamW or torch::optim::AdamW), an inf/NaN on rank 1 at one step;
//           rank 0 also replays the shards of every rank in one process (the reference).
//   plain   mixprec::distributed::clip_grad_norm_ on the shard, torch::optim::SGD, no scaler;
//           non-finite norms at two steps (one with error_if_nonfinite).
//   die     as scaler, with a checkpoint per step; the victim rank stops mid-step for the
//           driver to SIGKILL it.
//   load    no network: loads a checkpoint the die scenario wrote and prints what it holds.
// Writes what it saw to <dir>/rank<r>.out after every step (or the error to <dir>/rank<r>.err).
#include <mixprec/checkpoint.h>
#include <mixprec/clip.h>
#include <mixprec/distributed.h>
#include <mixprec/grad_scaler.h>
#include <mixprec/optim/adamw.h>
#include <mixprec/torch_version.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

namespace {

using mixprec::distributed::ProcessGroupPtr;

struct Args {
  std::string scenario;           // scaler | plain | die | load
  std::string optim = "fused";    // fused (mixprec::optim::AdamW) | torch (torch::optim::AdamW)
  std::string reducer = "world";  // world | none (the control: no reducer at all)
  std::string dir;
  std::string master = "127.0.0.1";  // rank 0's address: the TCPStore
  std::string ip = "127.0.0.1";      // this rank's address: Gloo binds to it
  int port = 29500;
  int rank = 0;
  int world = 1;
  int steps = 6;
  int timeout_ms = 20000;
  double norm_type = 2.0;
  int bad_step = 2;  // rank 1 puts an inf (NaN for norm_type inf) into a grad of its shard
  int victim = -1;   // die: this rank stops mid-step at kill_step
  int kill_step = 3;
  std::string ckpt;  // load: the checkpoint file
};

Args parse(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i + 1 < argc; i += 2) kv[argv[i]] = argv[i + 1];
  Args a;
  auto str = [&](const char* key, std::string& to) {
    if (kv.count(key)) to = kv[key];
  };
  auto num = [&](const char* key, int& to) {
    if (kv.count(key)) to = std::atoi(kv[key].c_str());
  };
  str("--scenario", a.scenario);
  str("--optim", a.optim);
  str("--reducer", a.reducer);
  str("--dir", a.dir);
  str("--master", a.master);
  str("--ip", a.ip);
  str("--ckpt", a.ckpt);
  num("--port", a.port);
  num("--rank", a.rank);
  num("--world", a.world);
  num("--steps", a.steps);
  num("--timeout-ms", a.timeout_ms);
  num("--bad-step", a.bad_step);
  num("--victim", a.victim);
  num("--kill-step", a.kill_step);
  if (kv.count("--norm-type")) a.norm_type = std::strtod(kv["--norm-type"].c_str(), nullptr);
  return a;
}

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string hex_list(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kFloat).contiguous().view(-1);
  std::string out;
  for (int64_t i = 0; i < flat.numel(); ++i) out += " " + hex(flat[i].item<float>());
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path + ".tmp");
  out << text;
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());  // the driver never reads half a file
}

constexpr int64_t kIn = 6, kBatch = 8;
constexpr double kMaxNorm = 0.5;  // below most steps' norms: the clip changes the grads

// Shard r of the parameters: its own tensors, which only rank r holds (uneven: rank r has a
// hidden layer of 3 + 2r units). Made from a seed of its own, so the reference makes the same.
struct ShardImpl : torch::nn::Module {
  torch::Tensor a, c, b;
  explicit ShardImpl(int r) {
    torch::manual_seed(1000 + r);
    const int64_t hidden = 3 + 2 * r;
    a = register_parameter("a", torch::randn({kIn, hidden}) * 0.5);
    c = register_parameter("c", torch::randn({hidden}) * 0.1);
    b = register_parameter("b", torch::randn({hidden, 1}) * 0.5);
  }
  torch::Tensor forward(const torch::Tensor& h) { return torch::tanh(h.matmul(a) + c).matmul(b); }
};
TORCH_MODULE(Shard);

// The replicated trunk: the same on every rank (same seed), its grads summed over the ranks.
torch::nn::Linear make_trunk() {
  torch::manual_seed(7);
  return torch::nn::Linear(kIn, kIn);
}

// Rank r's data at `step` (the reference makes every rank's).
std::pair<torch::Tensor, torch::Tensor> batch(int r, int step) {
  torch::manual_seed(100000 + 100 * step + r);
  torch::Tensor x = torch::randn({kBatch, kIn});
  torch::Tensor y = torch::randn({kBatch, 1}) * (1.0 + r);
  return {x, y};
}

// Rank r's share of the objective, sum over the ranks of mse_r / world.
torch::Tensor loss_of(torch::nn::Linear& trunk, Shard& shard, int r, int step, int world) {
  auto [x, y] = batch(r, step);
  torch::Tensor h = torch::tanh(trunk->forward(x));
  return torch::mse_loss(shard->forward(h), y) / world;
}

bool poisoned(const Args& a, int r, int step) { return r == 1 && step == a.bad_step; }

// An inf (a NaN for norm_type inf: the reducer must send it as +inf) in shard r's first tensor.
void poison(const Args& a, Shard& shard) {
  const double v = std::isinf(a.norm_type) ? std::numeric_limits<double>::quiet_NaN()
                                           : std::numeric_limits<double>::infinity();
  shard->a.grad()[0][1].fill_(v);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Args& a, Shard& shard) {
  const auto options = torch::optim::AdamWOptions(0.05).weight_decay(0.01);
  if (a.optim == "fused") {
    return std::make_unique<mixprec::optim::AdamW>(shard->parameters(), options);
  }
  return std::make_unique<torch::optim::AdamW>(shard->parameters(), options);
}

mixprec::GradScalerOptions scaler_options() {
  return mixprec::GradScalerOptions().init_scale(4096.0).growth_interval(2);
}

// All shards in one process, trained on every rank's data with a plain GradScaler (no reducer):
// what the ranks together must compute. The trunk comes from rank 0 at every step (it is
// replicated, bit-identical on every rank: the driver checks), so only the norm's summation
// order differs from the distributed run.
struct Reference {
  std::vector<Shard> shards;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  mixprec::GradScaler scaler{scaler_options()};

  explicit Reference(const Args& a) {
    std::vector<torch::Tensor> params;
    for (int r = 0; r < a.world; ++r) {
      shards.emplace_back(r);
      for (const auto& p : shards.back()->parameters()) params.push_back(p);
    }
    const auto options = torch::optim::AdamWOptions(0.05).weight_decay(0.01);
    if (a.optim == "fused") {
      optimizer = std::make_unique<mixprec::optim::AdamW>(params, options);
    } else {
      optimizer = std::make_unique<torch::optim::AdamW>(params, options);
    }
  }

  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> out;
    for (const auto& s : shards) {
      for (const auto& p : s->parameters()) out.push_back(p);
    }
    return out;
  }
};

// Starts the TCPStore (rank 0 serves it at its address) and the Gloo group on this rank's address.
ProcessGroupPtr join(const Args& a) {
  const auto timeout = std::chrono::milliseconds(a.timeout_ms);
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(a.port);
  options.isServer = a.rank == 0;
  options.numWorkers = static_cast<std::size_t>(a.world);
  options.waitWorkers = true;
  options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(a.master, options);
  ProcessGroupPtr world =
      mixprec::distributed::make_gloo_process_group(store, a.rank, a.world, timeout, a.ip);
  world->barrier()->wait();  // every connection made before any rank goes on
  return world;
}

// "host <network namespace> <address>": the driver checks that every rank had a network of its own.
std::string host_line(const Args& a) {
  char buf[256] = {};
  const ssize_t n = readlink("/proc/self/ns/net", buf, sizeof buf - 1);
  return "host " + std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0) + " " + a.ip + "\n";
}

void all_reduce_sum(const ProcessGroupPtr& world, const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    std::vector<torch::Tensor> grads{p.grad()};
    world->allreduce(grads)->wait();  // SUM: the loss already divides by the world size
  }
}

std::string params_line(const char* key, const std::vector<torch::Tensor>& params) {
  std::string line = key;
  for (const auto& p : params) line += hex_list(p);
  return line + "\n";
}

// scaler / die: per step "step <s> norm <hex> applied <0|1> trunk <0|1> scale <hex>"; at the end
// "trunk <hex>..." and "shard <hex>..."; rank 0 also "ref <s> norm <hex> applied <0|1> scale
// <hex>" per step and "refshard <r> <hex>..." per shard. die: "saved <s> <shard hex>... scale
// <hex>" after each checkpoint.
int run_scaler(const Args& a, const ProcessGroupPtr& world) {
  const std::string out_path = a.dir + "/rank" + std::to_string(a.rank) + ".out";
  torch::nn::Linear trunk = make_trunk();
  Shard shard(a.rank);
  std::unique_ptr<torch::optim::Optimizer> shard_optimizer = make_optimizer(a, shard);
  torch::optim::SGD trunk_optimizer(trunk->parameters(), torch::optim::SGDOptions(0.1));
  mixprec::GradScaler scaler(scaler_options());
  if (a.reducer != "none") {
    // The one collective of the clip: the global norm and the shard's found_inf, for every
    // norm_type. No found_inf reducer: the trunk's grads are summed over the ranks, so its
    // found_inf is the same everywhere, and the shard's goes through the grad norm reducer.
    scaler.set_grad_norm_reducer(mixprec::distributed::grad_norm_reducer(world));
  }
  std::unique_ptr<Reference> ref;
  if (a.rank == 0 && a.scenario == "scaler") ref = std::make_unique<Reference>(a);

  std::string out = host_line(a);
  for (int step = 0; step < a.steps; ++step) {
    if (ref) {
      // The reference's step, on the trunk as it is now on every rank.
      ref->optimizer->zero_grad();
      torch::Tensor loss = torch::zeros({});
      for (int r = 0; r < a.world; ++r) {
        loss = loss + loss_of(trunk, ref->shards[r], r, step, a.world);
      }
      trunk->zero_grad();
      ref->scaler.scale(loss).backward();
      if (a.world > 1 && step == a.bad_step) poison(a, ref->shards[1]);
      torch::Tensor norm = ref->scaler.clip_grad_norm_(*ref->optimizer, kMaxNorm, a.norm_type);
      ref->scaler.step(*ref->optimizer);
      std::ostringstream line;
      line << "ref " << step << " norm " << hex(norm.item<float>()) << " applied "
           << ref->scaler.last_step_applied(*ref->optimizer);
      ref->scaler.update();
      line << " scale " << hex(ref->scaler.get_scale()) << "\n";
      out += line.str();
    }
    shard_optimizer->zero_grad();
    trunk_optimizer.zero_grad();
    scaler.scale(loss_of(trunk, shard, a.rank, step, a.world)).backward();
    if (poisoned(a, a.rank, step)) poison(a, shard);
    all_reduce_sum(world, trunk->parameters());
    if (a.scenario == "die" && a.rank == a.victim && step == a.kill_step) {
      // Mid-step: the trunk's collective is done, the clip's is not. A pause, so that the others
      // are surely waiting in the clip's collective; then the driver kills this rank.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      write_file(a.dir + "/rank" + std::to_string(a.rank) + ".mid", "mid-step\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(a.timeout_ms) * 10);
      std::_Exit(4);
    }
    torch::Tensor norm = scaler.clip_grad_norm_(*shard_optimizer, kMaxNorm, a.norm_type);
    scaler.step(*shard_optimizer);
    scaler.step(trunk_optimizer);
    std::ostringstream line;
    line << "step " << step << " norm " << hex(norm.item<float>()) << " applied "
         << scaler.last_step_applied(*shard_optimizer) << " trunk "
         << scaler.last_step_applied(trunk_optimizer);
    scaler.update();
    line << " scale " << hex(scaler.get_scale()) << "\n";
    out += line.str();
    if (a.scenario == "die") {
      // A sharded checkpoint: this rank's shard, its optimizer and the scaler.
      mixprec::save_checkpoint(a.dir + "/ckpt" + std::to_string(a.rank) + ".pt", *shard,
                               *shard_optimizer, scaler);
      out += "saved " + std::to_string(step) +
             hex_list(torch::cat({shard->a.view(-1), shard->c.view(-1), shard->b.view(-1)})) +
             " scale " + hex(scaler.get_scale()) + "\n";
    }
    write_file(out_path, out);
  }
  world->barrier()->wait();  // nobody leaves while a peer may still use the store
  out += params_line("trunk", trunk->parameters());
  out += params_line("shard", shard->parameters());
  if (ref) {
    for (int r = 0; r < a.world; ++r) {
      out += params_line(("refshard " + std::to_string(r)).c_str(), ref->shards[r]->parameters());
    }
  }
  write_file(out_path, out);
  return 0;
}

// plain: mixprec::distributed::clip_grad_norm_ without a scaler. Per step "step <s> norm <hex>"
// (or "step <s> nonfinite <message>"); rank 0 also "ref <s> norm <hex>" from
// mixprec::clip_grad_norm_ over every shard in one process. Rank 1 poisons its shard at bad_step
// (error_if_nonfinite off: every rank gets the non-finite norm and skips its step) and at
// bad_step + 2 (error_if_nonfinite on: every rank throws PyTorch's message).
int run_plain(const Args& a, const ProcessGroupPtr& world) {
  const std::string out_path = a.dir + "/rank" + std::to_string(a.rank) + ".out";
  torch::nn::Linear trunk = make_trunk();
  Shard shard(a.rank);
  torch::optim::SGD shard_optimizer(shard->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD trunk_optimizer(trunk->parameters(), torch::optim::SGDOptions(0.1));
  std::unique_ptr<Reference> ref;
  std::unique_ptr<torch::optim::SGD> ref_optimizer;
  if (a.rank == 0) {
    ref = std::make_unique<Reference>(a);
    ref_optimizer =
        std::make_unique<torch::optim::SGD>(ref->params(), torch::optim::SGDOptions(0.1));
  }
  const int error_step = a.bad_step + 2;
  std::string out = host_line(a);
  // Refused before any collective, so every rank throws alike and the group stays in step:
  // "rejects <what> <message>".
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto rejects = [&](const std::string& what, const std::function<void()>& call) {
    try {
      call();
      out += "rejects " + what + " nothing\n";
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      out += "rejects " + what + " " + message.substr(0, message.find(',')) + "\n";
    }
  };
  for (double p : {0.0, -1.0, -inf, nan}) {
    rejects("p=" + hex(p), [&] {
      mixprec::distributed::clip_grad_norm_(shard->parameters(), kMaxNorm, world, p);
    });
  }
  rejects("pair3", [&] {
    torch::Tensor three = torch::zeros({3}, torch::kDouble);
    mixprec::distributed::grad_norm_reducer(world)(three, 2.0);
  });
  for (int step = 0; step < a.steps; ++step) {
    const bool bad = step == a.bad_step || step == error_step;
    const bool error_if_nonfinite = step == error_step;
    if (ref) {
      ref_optimizer->zero_grad();
      torch::Tensor loss = torch::zeros({});
      for (int r = 0; r < a.world; ++r) {
        loss = loss + loss_of(trunk, ref->shards[r], r, step, a.world);
      }
      trunk->zero_grad();
      loss.backward();
      if (a.world > 1 && bad) poison(a, ref->shards[1]);
      try {
        torch::Tensor norm =
            mixprec::clip_grad_norm_(ref->params(), kMaxNorm, a.norm_type, error_if_nonfinite);
        out += "ref " + std::to_string(step) + " norm " + hex(norm.item<float>()) + "\n";
        if (std::isfinite(norm.item<float>())) ref_optimizer->step();
      } catch (const c10::Error& e) {
        out += "ref " + std::to_string(step) + " nonfinite " +
               std::string(e.what_without_backtrace()).substr(0, 40) + "\n";
      }
    }
    shard_optimizer.zero_grad();
    trunk_optimizer.zero_grad();
    torch::Tensor loss = loss_of(trunk, shard, a.rank, step, a.world);
    loss.backward();
    if (bad && a.rank == 1) poison(a, shard);
    all_reduce_sum(world, trunk->parameters());
    try {
      torch::Tensor norm = mixprec::distributed::clip_grad_norm_(
          shard->parameters(), kMaxNorm, world, a.norm_type, error_if_nonfinite);
      out += "step " + std::to_string(step) + " norm " + hex(norm.item<float>()) + "\n";
      if (std::isfinite(norm.item<float>())) shard_optimizer.step();  // every rank alike
    } catch (const c10::Error& e) {
      out += "step " + std::to_string(step) + " nonfinite " +
             std::string(e.what_without_backtrace()).substr(0, 40) + "\n";
    }
    trunk_optimizer.step();
    write_file(out_path, out);
  }
  world->barrier()->wait();
  out += params_line("trunk", trunk->parameters());
  out += params_line("shard", shard->parameters());
  if (ref) {
    for (int r = 0; r < a.world; ++r) {
      out += params_line(("refshard " + std::to_string(r)).c_str(), ref->shards[r]->parameters());
    }
  }
  write_file(out_path, out);
  return 0;
}

// load: "loaded <shard hex>... scale <hex>" from the checkpoint of rank `rank`, into a fresh
// shard, optimizer and scaler.
int run_load(const Args& a) {
  Shard shard(a.rank);
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(a, shard);
  mixprec::GradScaler scaler(scaler_options());
  mixprec::load_checkpoint(a.ckpt, *shard, *optimizer, scaler);
  write_file(a.dir + "/load" + std::to_string(a.rank) + ".out",
             "loaded" +
                 hex_list(torch::cat({shard->a.view(-1), shard->c.view(-1), shard->b.view(-1)})) +
                 " scale " + hex(scaler.get_scale()) + "\n");
  return 0;
}

int run(const Args& a) {
  torch::set_num_threads(1);
  if (a.scenario == "load") return run_load(a);
  ProcessGroupPtr world = join(a);
  if (a.scenario == "plain") return run_plain(a, world);
  if (a.scenario == "scaler" || a.scenario == "die") return run_scaler(a, world);
  throw std::runtime_error("unknown scenario '" + a.scenario + "'");
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::string err =
      a.dir + "/" + (a.scenario == "load" ? "load" : "rank") + std::to_string(a.rank) + ".err";
  try {
    return run(a);
  } catch (const c10::Error& e) {
    write_file(err, e.what_without_backtrace());
    // Skip destructors: a process group whose peer died may wait on it while shutting down.
    std::_Exit(2);
  } catch (const std::exception& e) {
    write_file(err, e.what());
    std::_Exit(2);
  }
}
