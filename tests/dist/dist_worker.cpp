// One rank of the distributed tests (dist_test.cpp starts 2 or 4 of these): Gloo over a c10d
// FileStore, a GradScaler with mixprec::distributed's reducer, injected inf/NaN; or the FP8 amax
// reduction (fp8_amax_reduction) on amaxes that differ per rank, and (LibTorch >= 2.1) an
// fp8::Linear trained with a delayed recipe reducing its amaxes. Writes what it saw to
// <dir>/rank<r>.out (or the error to <dir>/rank<r>.err) for the driver to compare.
#include <mixprec/distributed.h>
#include <mixprec/grad_scaler.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <mixprec/torch_version.h>
#include <torch/torch.h>
#include <unistd.h>
#if MIXPREC_TORCH_FP8
#include <mixprec/fp8.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using mixprec::distributed::ProcessGroupPtr;

struct Args {
  // skip | ddp | groups | die | stall | fp8 | fp8_groups | fp8_linear | fp8_linear_nan |
  // fp8_linear_nan_te | nvfp4_linear
  std::string scenario;
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

// ---- FP8 amax reduction ---------------------------------------------------------------------

// The amaxes rank r of `world` holds at `step` (dist_test.cpp's expected_fp8_amaxes gives their
// elementwise max): each entry differs per rank or holds a special value on one rank.
std::vector<float> fp8_amaxes(int r, int world, int step) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float s = static_cast<float>(step);
  return {
      1.0f + static_cast<float>(r) + s,                             // largest on the last rank
      10.0f - static_cast<float>(r) + 0.25f * s,                    // largest on rank 0
      0.0f,                                                         // 0 everywhere stays 0
      r == world - 1 ? nan : static_cast<float>(r) + 0.5f,          // a NaN on one rank: +inf
      r == 0 ? inf : 1.0f,                                          // inf stays inf
      r == 1 ? -nan : std::ldexp(static_cast<float>(r + 1), -140),  // a NaN with its sign bit
      r == world / 2 ? std::numeric_limits<float>::max() : 3.0f,
      r == world - 1 ? std::ldexp(s + 1.0f, -149) : 0.0f,  // a float subnormal survives
  };
}

std::string hex_list(const torch::Tensor& t) {
  const torch::Tensor flat = t.detach().to(torch::kFloat).contiguous().view(-1);
  std::string out;
  for (int64_t i = 0; i < flat.numel(); ++i) out += " " + hex(flat[i].item<float>());
  return out;
}

// Collectives issued on `group` so far (c10d's per-group sequence number; set up by the caller).
uint64_t collectives(const ProcessGroupPtr& group) { return group->getSequenceNumberForGroup(); }

// Starts the group's sequence number, where c10d asks for that: its ProcessGroup had
// setSequenceNumberForGroup() up to LibTorch 2.13 and lost it in 2.14, where the numbers start at
// 0 on every rank by themselves (the backend's call is kept as a no-op that warns).
template <typename Group>
auto start_sequence_numbers(Group& group, int) -> decltype(group.setSequenceNumberForGroup()) {
  group.setSequenceNumberForGroup();
}
template <typename Group>
void start_sequence_numbers(Group&, long) {}

// Per step: "local <step> <hex>..." (this rank's amaxes), "amax <step> <hex>..." (after the
// reduction) and "collectives <step> <n>...": how many collectives each group saw during it (one
// per group; "empty": none for an empty tensor).
std::string run_fp8_reduction(const Args& a, const std::vector<ProcessGroupPtr>& groups) {
  for (const auto& g : groups) start_sequence_numbers(*g, 0);
  std::function<void(at::Tensor&)> reduce = [](at::Tensor&) {};
  if (a.reducer != "none") reduce = mixprec::distributed::fp8_amax_reduction(groups);
  std::string out;
  for (int step = 0; step < a.steps; ++step) {
    const std::vector<float> values = fp8_amaxes(a.rank, a.world, step);
    const auto n = static_cast<int64_t>(values.size());
    torch::Tensor amaxes = torch::tensor(values);
    out += "local " + std::to_string(step) + hex_list(amaxes) + "\n";
    torch::Tensor view = amaxes;
    if (step == 1) {
      // A strided view: reduced through a contiguous copy, then written back into the view.
      torch::Tensor spread = torch::full({2 * n}, -7.0f);
      view = spread.slice(0, 0, 2 * n, 2);
      view.copy_(amaxes);
      amaxes = spread;
    }
    std::vector<uint64_t> before;
    for (const auto& g : groups) before.push_back(collectives(g));
    reduce(view);
    std::ostringstream line;
    line << "amax " << step << hex_list(view) << "\n";
    if (step == 1) line << "gaps " << step << hex_list(amaxes.slice(0, 1, 2 * n, 2)) << "\n";
    line << "collectives " << step;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      line << " " << collectives(groups[i]) - before[i];
    }
    line << "\n";
    out += line.str();
  }
  // An empty tensor (nothing cast since the last update) issues no collective.
  std::vector<uint64_t> before;
  for (const auto& g : groups) before.push_back(collectives(g));
  torch::Tensor empty = torch::empty({0});
  reduce(empty);
  out += "empty";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    out += " " + std::to_string(collectives(groups[i]) - before[i]);
  }
  out += "\n";
  return out;
}

#if MIXPREC_TORCH_FP8
// fp8::Linear with a delayed recipe whose amaxes are reduced over the world, each rank training
// on its own data (plain SGD on its local gradients, so the weights part too). Per iteration it
// prints the amaxes of that iteration measured here with torch ops ("local <it> <input> <weight>
// <grad_output>"), independent of the recipe; at the end the module's delayed-scaling buffers.
// The driver takes the max over the ranks and runs the delayed rule itself. With `plant_nan`
// (scenarios fp8_linear_nan: NaNs propagated, fp8_linear_nan_te: TE's default, skipped), rank 1
// puts a NaN into its input of iteration kNanAt, and no rank steps its optimizer in that
// iteration (as a GradScaler would skip it); each iteration also prints the scales its update
// gave ("scales <it> <input> <weight> <grad_output>").
constexpr int kNanAt = 2;
std::string run_fp8_linear(const Args& a, const ProcessGroupPtr& world, bool plant_nan = false,
                           mixprec::fp8::NanAmax nan = mixprec::fp8::NanAmax::kIgnore) {
  constexpr int64_t kHistory = 4;
  // Delayed scaling (the default), HYBRID, margin 0, "max".
  mixprec::fp8::Recipe recipe(mixprec::fp8::RecipeOptions().amax_history_len(kHistory));
  if (nan != recipe.options().nan_amax()) {  // fp8_linear_nan: torchao's policy, not TE's default
    recipe = mixprec::fp8::Recipe(mixprec::fp8::RecipeOptions(recipe.options()).nan_amax(nan));
  }
  if (a.reducer != "none") {
    recipe.set_amax_reduction(mixprec::distributed::fp8_amax_reduction(world));
  }
  torch::manual_seed(0);
  mixprec::fp8::Linear model(mixprec::fp8::LinearOptions(16, 16).amax_history_len(kHistory));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::manual_seed(200 + a.rank);
  std::string out;
  for (int it = 0; it < a.steps; ++it) {
    // Data of a different magnitude per rank and iteration: the max moves between ranks.
    const double magnitude = 1.0 + ((it + a.rank) % a.world) * 3.0;
    torch::Tensor x = torch::randn({8, 16}) * magnitude;
    torch::Tensor target = torch::randn({8, 16});
    const bool nan_here = plant_nan && it == kNanAt;
    if (nan_here && a.rank == 1) x[3][5] = std::numeric_limits<float>::quiet_NaN();
    const float w_amax = model->weight.detach().abs().max().item<float>();
    torch::Tensor grad_amax = torch::zeros({1});
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      mixprec::fp8::Autocast fp8(recipe);  // updates the scales from the last iteration's amaxes
      if (plant_nan) out += "scales " + std::to_string(it) + hex_list(model->scale) + "\n";
      torch::Tensor y = model->forward(x);
      y.register_hook([grad_amax](const torch::Tensor& g) {
        grad_amax.copy_(g.detach().abs().max().reshape({1}));
      });
      loss = torch::mse_loss(y, target);
    }
    loss.backward();
    if (!nan_here) optimizer.step();
    std::ostringstream line;
    line << "local " << it << " " << hex(x.abs().max().item<float>()) << " " << hex(w_amax) << " "
         << hex(grad_amax.item<float>()) << "\n";
    out += line.str();
  }
  recipe.update();  // the last iteration's amaxes, as the next Autocast would
  out += "history" + hex_list(model->amax_history) + "\n";
  out += "scale" + hex_list(model->scale) + "\n";
  out += "scale_inv" + hex_list(model->scale_inv) + "\n";
  return out;
}

// fp8::Linear under the NVFP4 recipe, each rank with an input of its own magnitude, the recipe's
// amax reduction over the world unless the reducer is "none". The worker measures the max of the
// ranks' input amaxes G with its own all-reduce, then builds the forward twice from
// fp4::quantize_nvfp4: with the input's per-tensor amax G (a row [G, 0, ...] appended, so that
// the op's amax is G; the input's own blocks are its rows) and with its own. It prints which of
// the two the module's output is, bit for bit: "match <global> <local>" and its amax.
std::string run_nvfp4_linear(const Args& a, const ProcessGroupPtr& world) {
  namespace fp4 = mixprec::fp4;
  namespace fp8 = mixprec::fp8;
  fp8::Recipe recipe(fp8::RecipeOptions().scaling(fp8::Scaling::kNvfp4));
  if (a.reducer != "none") recipe.set_amax_reduction(mixprec::distributed::fp8_amax_reduction(world));
  torch::manual_seed(0);
  fp8::Linear model(fp8::LinearOptions(32, 32));
  torch::manual_seed(300 + a.rank);
  const torch::Tensor x = torch::randn({32, 32}) * (1.0 + 3.0 * a.rank);
  torch::Tensor y;
  {
    fp8::Autocast fp4_scope(recipe);
    y = model->forward(x.requires_grad_(true));
  }
  y.sum().backward();  // the backward casts reduce too: every rank must take part
  torch::Tensor global = x.detach().abs().max().reshape({1});
  const float local = global.item<float>();
  std::vector<torch::Tensor> io{global};
  world->allreduce(io, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
  const auto forward_with = [&](float amax) {
    torch::Tensor row = torch::zeros({1, 32});
    row[0][0] = amax;
    const torch::Tensor q =
        fp4::dequantize_nvfp4(fp4::quantize_nvfp4(torch::cat({x.detach(), row})), torch::kFloat);
    const torch::Tensor w = fp4::dequantize_nvfp4(fp4::quantize_nvfp4(model->weight.detach(), true),
                                                  torch::kFloat);
    return torch::linear(q.slice(0, 0, 32), w, model->bias.detach());
  };
  const bool global_match = forward_with(global.item<float>()).equal(y.detach());
  const bool local_match = forward_with(local).equal(y.detach());
  return "match " + std::to_string(global_match) + " " + std::to_string(local_match) + "\namax " +
         hex(local) + "\n";
}
#endif

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

  if (a.scenario == "groups" || a.scenario == "fp8_groups") {
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
  const std::string out_path = a.dir + "/rank" + std::to_string(a.rank) + ".out";
  if (a.scenario == "fp8" || a.scenario == "fp8_groups") {
    write_file(out_path, run_fp8_reduction(a, groups));
    return 0;
  }
  if (a.scenario == "nvfp4_linear") {
#if MIXPREC_TORCH_FP8
    write_file(out_path, run_nvfp4_linear(a, world));
    return 0;
#else
    throw std::runtime_error("nvfp4_linear needs LibTorch >= 2.1 (float8 dtypes)");
#endif
  }
  if (a.scenario.rfind("fp8_linear", 0) == 0) {
#if MIXPREC_TORCH_FP8
    const bool plant_nan = a.scenario != "fp8_linear";
    const auto nan = a.scenario == "fp8_linear_nan" ? mixprec::fp8::NanAmax::kPropagate
                                                    : mixprec::fp8::NanAmax::kIgnore;
    write_file(out_path, run_fp8_linear(a, world, plant_nan, nan));
    return 0;
#else
    throw std::runtime_error("fp8_linear needs LibTorch >= 2.1 (float8 dtypes)");
#endif
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
  write_file(out_path, out);
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
