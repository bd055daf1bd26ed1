// The walk of docs/errors.md: every row of its message tables is triggered through the public API,
// and each message caught must contain the row's backticked fragments, in order. A row without a
// trigger, a trigger without a row, and a trigger that throws nothing or another text all fail.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mixprec/core/kernels.h"
#include "mixprec/core/loss_scaler.h"
#include "mixprec/core/optim_kernels.h"
#include "mixprec/mixprec.h"
#include "mixprec/torch_version.h"
#include "torch/errors_walk_reader.h"
#include "torch/errors_walk_triggers.h"
#include "torch/views.h"  // detail::torch_cuda_built(): which CUDA row applies to this build
#ifdef MIXPREC_HAS_DISTRIBUTED
#include "mixprec/distributed.h"
#endif
#if MIXPREC_TORCH_FP8
#include "mixprec/fp8.h"
#endif

namespace mixprec {
namespace {

// ---- docs/errors.md ------------------------------------------------------------------------

struct Row {
  std::string cell;                    // the first column, as written
  std::vector<std::string> fragments;  // its backticked texts, in order
  int line = 0;
};

// The rows of every table whose header starts "| Message (contains) |".
std::vector<Row> read_rows() {
  std::ifstream in(MIXPREC_ERRORS_MD);
  EXPECT_TRUE(in) << "cannot read " << MIXPREC_ERRORS_MD;
  std::vector<Row> rows;
  bool in_table = false;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.rfind("| Message (contains) |", 0) == 0) {
      in_table = true;
    } else if (!in_table || line.rfind("|---", 0) == 0) {
      continue;
    } else if (line.rfind("| ", 0) != 0) {
      in_table = false;
    } else {
      Row row;
      row.line = number;
      bool code = false;
      for (std::size_t i = 2; i < line.size() && (code || line[i] != '|'); ++i) {
        row.cell += line[i];
        if (line[i] == '`') {
          code = !code;
          if (code) row.fragments.emplace_back();
        } else if (code) {
          row.fragments.back() += line[i];
        }
      }
      while (!row.cell.empty() && row.cell.back() == ' ') row.cell.pop_back();
      rows.push_back(row);
    }
  }
  return rows;
}

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Whether `message` contains `fragment`, where "..." stands for any text and a lone N for a number.
bool matches(const std::string& message, const std::string& fragment) {
  std::string pattern;
  for (std::size_t i = 0; i < fragment.size(); ++i) {
    const char c = fragment[i];
    if (fragment.compare(i, 3, "...") == 0) {
      pattern += "[\\s\\S]*";
      i += 2;
    } else if (c == 'N' && (i == 0 || !is_word(fragment[i - 1])) &&
               (i + 1 == fragment.size() || !is_word(fragment[i + 1]))) {
      pattern += "[0-9]+";
    } else {
      if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) pattern += '\\';
      pattern += c;
    }
  }
  return std::regex_search(message, std::regex(pattern));
}

// ---- triggers (errors_walk_triggers.h) -------------------------------------------------------

using namespace errors_walk;  // NOLINT(build/namespaces): the walk's own vocabulary

std::vector<Trigger> triggers() {
  using core::DType;
  using torch::ones;
  using torch::zeros;
  const std::vector<torch::Tensor> g{ones({4})};
  const torch::Tensor f = zeros({}), inv = ones({}), meta = on_meta(-1);
  std::vector<Trigger> t = {
      {"ScaleIsNone",
       "`Attempted unscale_ but _scale is None.",
       {on_model([](Model& m) { m.scaler.unscale_(m.opt); }, {}, false),
        on_model([](Model& m) { m.scaler.step(m.opt); }, {}, false),
        on_model([](Model& m) { m.scaler.update(); }, {}, false)}},
      {"UnscaleTwice", "`unscale_() has already been called", {on_model([](Model& m) {
         m.scaler.unscale_(m.opt);
         m.scaler.unscale_(m.opt);
       })}},
      {"UnscaleAfterStep", "`unscale_() is being called after step()", {on_model([](Model& m) {
         m.scaler.step(m.opt);
         m.scaler.unscale_(m.opt);
       })}},
      {"ThrowingReducerUnscalesOnce", "(no error) a found_inf reducer throws", {[] {
         Model m(GradScalerOptions().init_scale(4.0), false);
         int calls = 0;
         m.scaler.set_found_inf_reducer([&calls](at::Tensor&) {
           if (++calls == 1) throw std::runtime_error("collective timed out");
         });
         m.scaler.scale(ones({1}));
         m.w.mutable_grad() = torch::full({3}, 8.0f);
         EXPECT_THROW(m.scaler.unscale_(m.opt), std::runtime_error);
         EXPECT_THROW(m.scaler.unscale_(m.opt), c10::Error);  // "already been called"
         m.scaler.step(m.opt);  // reduces again, then steps on grads divided once
         EXPECT_EQ(calls, 2);
         EXPECT_TRUE(torch::equal(m.w.detach(), torch::full({3}, -2.0f)));
         return std::string();
       }}},
      {"BackwardAfterAStep", "`one of the variables needed for gradient computation", {thrown([] {
         torch::Tensor w = ones({3}, torch::requires_grad());
         torch::Tensor y = (w * w).sum();
         y.backward({}, /*retain_graph=*/true);
         optim::SGD(std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(0.1)).step();
         y.backward();
       })}},
      {"Closure", "`Closure use is not currently supported", {on_model([](Model& m) {
         m.scaler.step(m.opt, [] { return zeros({}); });
       })}},
      {"StepTwice", "`step() has already been called", {on_model([](Model& m) {
         m.scaler.step(m.opt);
         m.scaler.step(m.opt);
       })}},
      {"NoGrads", "`No inf checks were recorded for this optimizer.", {on_model([](Model& m) {
         m.w.mutable_grad() = torch::Tensor();
         m.scaler.step(m.opt);
       })}},
      {"UpdateWithoutStep",
       "`No inf checks were recorded prior to update.",
       {on_model([](Model& m) { m.scaler.update(); })}},
      {"Fp16Grads", "`Attempting to unscale FP16 gradients.", {on_model([](Model& m) {
         m.w.mutable_grad() = ones({3}, torch::kHalf);
         m.scaler.step(m.opt);
       })}},
      {"NonFiniteNorm",
       "`The total norm of order 2.0",
       {thrown([] {
          torch::Tensor w = zeros({2}, torch::requires_grad());
          w.mutable_grad() = torch::full({2}, std::numeric_limits<float>::infinity());
          clip_grad_norm_({w}, 1.0, 2.0, /*error_if_nonfinite=*/true);
        }),
        thrown([] {
          torch::Tensor w = zeros({2}, torch::requires_grad());
          w.mutable_grad() = torch::full({2}, std::numeric_limits<float>::quiet_NaN());
          clip_grad_norm_({w}, 1.0, 2.0, /*error_if_nonfinite=*/true);
        })}},
      {"SparseClip", "`clip_grad_norm_: sparse gradients are not supported", {thrown([] {
         torch::Tensor w = zeros({3}, torch::requires_grad());
         w.mutable_grad() = ones({3}).to_sparse();
         clip_grad_norm_({w}, 1.0);
       })}},
      // Python's text changed in PyTorch 2.9 (MIXPREC_TORCH_UPDATE_REASON_IN_ONE_LINE): a row each.
      {"NewScaleTensor",
       "`new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch",
       {new_scale_message()},
       [] { return from_version(2, 9, "PyTorch < 2.9: the row with a run of spaces applies"); }},
      {"NewScaleTensorBefore29",
       "`new_scale should be a float or a 1-element torch.cuda.FloatTensor or ...",
       {new_scale_message()},
       [] { return before_version(2, 9, "PyTorch >= 2.9: the one-sentence row applies"); }},
      {"EmptyStateDict", "`The source state dict is empty", {thrown([] {
         GradScaler().load_state_dict(
             c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
       })}},
      {"MalformedStateDict",
       "`GradScaler.load_state_dict: missing key",
       {load_with("growth_interval", {}, /*erase=*/true),
        load_with("growth_factor", std::string("2")), load_with("_growth_tracker", 1.5)}},
      {"InvalidOptions",
       "`GradScaler: growth_factor must be > 1.0",
       {scaler_with(GradScalerOptions().growth_factor(0.5)),
        scaler_with(GradScalerOptions().backoff_factor(1.0)),
        scaler_with(GradScalerOptions().growth_interval(0)),
        scaler_with(GradScalerOptions().init_scale(0.0)),
        scaler_with(GradScalerOptions().init_scale(1e300))}},
      {"FunctionalArguments",
       "`inv_scale must be a 1-element tensor.",
       {unscale_args(g, f, ones({2})), unscale_args(g, zeros({}, torch::kDouble), inv),
        update_args(ones({}), zeros({}), f),
        update_args(ones({}, torch::kDouble), zeros({}, torch::kInt), f)}},
      {"SparseGrads",
       "`one of scaled_grads was not a strided tensor.",
       {unscale_args({ones({4}).to_sparse()}, f, inv)}},
      {"DevicesDiffer",
       "`scaled_grads must be on the same device.",
       {unscale_args({g[0], on_meta(4)}, f, inv), unscale_args(g, meta, inv)}},
      {"IntegerGrads",
       "`expected a float32, float64, float16 or bfloat16 tensor",
       {unscale_args({ones({4}, torch::kInt)}, f, inv)}},
      {"CudaTensorsWithoutCuda",
       "`mixprec: got tensors on cuda:0, but this mixprec was built",
       {update_args(claims_cuda(at::kFloat), claims_cuda(at::kInt), claims_cuda(at::kFloat))},
       [] {
         return std::string(detail::torch_cuda_built() ? "mixprec has CUDA kernels for tensors"
                                                       : "");
       },
       /*skip=*/true},
      {"CudaViewsWithoutCudaKernels",
       "`got CUDA buffers, but this build of mixprec has no CUDA",
       {thrown([] {
         float found = 0, inv = 1;
         core::non_finite_check_and_unscale_({view(DType::kFloat32, kCuda0)}, &found, &inv);
       })},
       [] {
         return std::string(core::cuda_kernels_built() ? "mixprec::core has CUDA kernels" : "");
       },
       /*skip=*/true},
      {"OtherDevices",
       "`mixprec: got tensors on meta; only CPU and CUDA",
       {update_args(meta, on_meta(-1, torch::kInt), meta), unscale_args({on_meta(4)}, meta, meta)}},
      {"AutocastCpuFp16",
       "`AutocastGuard: CPU autocast supports only torch.bfloat16",
       {thrown([] { AutocastGuard guard(torch::kCPU, torch::kHalf); })},
       [] {
         if (!MIXPREC_TORCH_CPU_FP16_AUTOCAST) return std::string();
         EXPECT_NO_THROW({ AutocastGuard guard(torch::kCPU, torch::kHalf); });  // instead
         return std::string("LibTorch >= 2.2 has CPU autocast in fp16: AutocastGuard takes it");
       }},
      {"AutocastCudaDtype", "`AutocastGuard: CUDA autocast supports torch.float16 and", {thrown([] {
         AutocastGuard guard(torch::kCUDA, torch::kDouble);
       })}},
      {"AutocastDevice", "`AutocastGuard: device_type must be CPU or CUDA", {thrown([] {
         AutocastGuard guard(torch::kMeta);
       })}},
      // Python's text changed in PyTorch 2.10 (MIXPREC_TORCH_AUTOCAST_WARNING_NAMES_XLA).
      {"AutocastCudaWithoutDevice",
       "warning `CUDA is not available or torch_xla",
       {autocast_cuda_warning()},
       [] {
         const std::string why = cuda_autocast_is_on();
         if (!why.empty()) return why;
         return from_version(2, 10, "PyTorch < 2.10: the older warning's row applies");
       }},
      {"AutocastCudaWithoutDeviceBefore210",
       "warning `User provided device_type of 'cuda'",
       {autocast_cuda_warning()},
       [] {
         const std::string why = cuda_autocast_is_on();
         if (!why.empty()) return why;
         return before_version(2, 10, "PyTorch >= 2.10: the newer warning's row applies");
       }},
      {"LossScalerUpdate", "`LossScaler: No inf checks", {thrown([] {
         core::LossScaler().update();
       })}},
      {"LossScalerCuda", "`LossScaler: unscale_ takes CPU buffers only", {thrown([] {
         core::LossScaler().unscale_({view(DType::kFloat32, kCuda0)});
       })}},
      {"ExtendedOptions",
       "`GradScaler: hysteresis must be >= 1",
       {scaler_with(GradScalerOptions().hysteresis(0)),
        scaler_with(GradScalerOptions().min_scale(8).max_scale(4)),
        scaler_with(GradScalerOptions().at_min_scale(AtMinScale::kCallback)),
        scaler_with(GradScalerOptions().history_size(-1)),
        scaler_with(GradScalerOptions().min_scale(-1)),
        scaler_with(GradScalerOptions().max_scale(0))}},
      {"OnEventEmpty", "`GradScaler::on_event: the callback is empty", {thrown([] {
         GradScaler().on_event(nullptr);
       })}},
      {"OverflowAtMinScale",
       "`GradScaler: the gradients overflowed while",
       {on_model(
           [](Model& m) {
             m.w.mutable_grad() = torch::full({3}, std::numeric_limits<float>::infinity());
             m.scaler.step(m.opt);
             m.scaler.update();
           },
           GradScalerOptions().init_scale(1).min_scale(1).at_min_scale(AtMinScale::kThrow))}},
      {"ExtendedStateDict",
       "`load_state_dict: \"scale\" must be finite",
       {load_with("scale", 0.0), load_with("_growth_tracker", std::int64_t{-1}),
        load_with("mixprec_format", std::int64_t{99}), load_with("_counters", std::string("x"))}},
      {"OptimizerOptions",
       "`Invalid learning rate`",
       {thrown([=] { optim::SGD(g, torch::optim::SGDOptions(-1)); }), thrown([=] {
          optim::Adam(g, torch::optim::AdamOptions().betas({1.5, 0.999}));
        })}},
      {"OptimizerCheckpoint",
       "`loaded state dict has a different number of parameter groups",
       {adam_checkpoint({g, std::vector<torch::Tensor>{ones({2})}}, g),
        adam_checkpoint({g}, {ones({4}), ones({2})})}},
      {"FusedSparse", "`... does not support sparse gradients", {thrown([] {
         torch::Tensor w = ones({4});
         w.mutable_grad() = ones({4}).to_sparse();
         optim::Adam(std::vector<torch::Tensor>{w}).step();
       })}},
      {"FusedCudaHalf",
       "`fused_sgd_: parameter N: param is float16;",
       {fused_sgd({sgd(view(DType::kFloat16, kCuda0), view(DType::kFloat16, kCuda0))})}},
      {"FusedViews",
       "`fused_sgd_: parameter N: grad is float16 but",
       {fused_sgd({sgd(view(), view(DType::kFloat16))}),
        fused_sgd({sgd(view(), view(DType::kFloat32, kCpu, 7))}),
        fused_sgd({sgd(view(), view(DType::kFloat32, kCpu, 8, nullptr))}),
        fused_sgd({sgd(view(), view(), view(DType::kFloat32, kCuda0))}, /*momentum=*/0.9)}},
      {"FusedDevices",
       "`fused_adam_: all parameters must be on one device",
       {fused_adam({adam(kCpu), adam(kCuda0)})}},
      {"FusedStepCount",
       "`fused_adam_: parameter N: CUDA parameters need a device step_count",
       {fused_adam({adam(kCuda0)}),
        fused_sgd({sgd(view(DType::kFloat32, kCuda0), view(DType::kFloat32, kCuda0),
                       view(DType::kFloat32, kCuda0))},
                  /*momentum=*/0.9),
        fused_adam({adam(kCpu, /*step=*/0)})}},
      {"CheckpointModel",
       "`Error(s) in loading state_dict for",
       {model_load([](auto& sd) { (void)sd.erase("weight"); }),
        model_load([](auto& sd) { (void)sd.erase("weight"); }),
        model_load([](auto& sd) { sd.insert("other", ones({1})); }),
        model_load([](auto& sd) { sd.insert_or_assign("weight", ones({2, 1})); })}},
      {"CheckpointFile",
       "`mixprec::load_checkpoint: ... has no dict under",
       {checkpoint_file([](const std::string& path, auto& model, auto& opt, auto& scaler) {
          const std::vector<char> bytes = pickle_save_untagged(module_state_dict(model));
          std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
          load_checkpoint(path, model, opt, scaler);
        }),
        checkpoint_file([](const std::string&, auto& model, auto& opt, auto& scaler) {
          save_checkpoint("/nonexistent-mixprec-folder/c.pt", model, opt, scaler);
        })}},
      {"CheckpointOptimizer",
       "`mixprec::load_optimizer_state_dict: param group N has maximize",
       {optimizer_load([](auto& group, auto&) { group.insert_or_assign("maximize", true); }),
        optimizer_load([](auto&, auto& state) { (void)state.erase("step"); }),
        optimizer_load([](auto& group, auto&) {
          group.insert_or_assign("params", c10::impl::GenericList(c10::AnyType::get()));
        })}},
      {"CheckpointDecayKind",
       "`mixprec::load_optimizer_state_dict: param group N has decoupled_weight_decay=True",
       {optimizer_load([](auto& group, auto&) {
          group.insert_or_assign("decoupled_weight_decay", true);
          group.insert_or_assign("weight_decay", 0.01);
        }),
        thrown([] {
          torch::nn::Linear model(1, 1);
          torch::optim::AdamW opt(model->parameters());
          auto sd = optimizer_state_dict(opt);
          sd.at("param_groups").toListRef()[0].toGenericDict().insert_or_assign(
              "decoupled_weight_decay", false);
          load_optimizer_state_dict(opt, sd);
        })}},
      {"CheckpointOtherOptimizer", "`mixprec::optimizer_state_dict: only SGD", {thrown([] {
         torch::nn::Linear model(1, 1);
         optimizer_state_dict(torch::optim::RMSprop(model->parameters()));
       })}},
      {"CheckpointStep", "`mixprec::load_optimizer_state_dict: \"step\" of parameter N must be",
       {optimizer_load([](auto&, auto& state) { state.insert_or_assign("step", 2.56897e24); })}},
#ifdef MIXPREC_HAS_DISTRIBUTED
      {"AllReduceFails",
       "`mixprec::distributed: all-reduce (MAX) of found_inf",
       {on_model([](Model& m) {
         m.scaler.set_found_inf_reducer(
             distributed::found_inf_reducer(c10::make_intrusive<DeadPeerGroup>()));
         m.scaler.step(m.opt);
       })}},
      {"ReducerArguments",
       "`mixprec::distributed::found_inf_reducer: needs at least one",
       {thrown([] { distributed::found_inf_reducer(std::vector<distributed::ProcessGroupPtr>{}); }),
        thrown([] { distributed::found_inf_reducer(distributed::ProcessGroupPtr()); })}},
      {"Fp8AllReduceFails", "`mixprec::distributed: all-reduce (MAX) of the FP8 amaxes", {thrown([] {
         at::Tensor amaxes = ones({3});
         distributed::fp8_amax_reduction(c10::make_intrusive<DeadPeerGroup>())(amaxes);
       })}},
      {"Fp8ReductionArguments",
       "`mixprec::distributed::fp8_amax_reduction: needs at least one",
       {thrown([] { distributed::fp8_amax_reduction(std::vector<distributed::ProcessGroupPtr>{}); }),
        thrown([] {
          at::Tensor amaxes = ones({2}).to(torch::kInt);
          distributed::fp8_amax_reduction(c10::make_intrusive<DeadPeerGroup>())(amaxes);
        })}},
#endif
#if MIXPREC_TORCH_FP8
      {"Fp8Dtype", "`fp8::quantize: expected Float8_e4m3fn", {thrown([] {
         fp8::quantize(ones({2}), ones({1}), torch::kFloat);
       })}},
      {"Fp8RecipeOptions",
       "`fp8::Recipe: amax_history_len must be",
       {thrown([] { fp8::Recipe(fp8::RecipeOptions().amax_history_len(0)); }),
        thrown([] { fp8::Recipe(fp8::RecipeOptions().margin(128)); }),
        thrown([] { fp8::Recipe(fp8::RecipeOptions().eps(0)); })}},
      {"Fp8LinearHistory", "`fp8::Linear: its amax_history has", {thrown([] {
         fp8::Recipe recipe;  // history 1024
         fp8::Linear lin(fp8::LinearOptions(2, 2).amax_history_len(4));
         fp8::Autocast scope(recipe);
         lin(ones({1, 2}));
       })}},
      {"Fp8MxScales", "`fp8::dequantize_mxfp8: scales of shape", {thrown([] {
         fp8::MxTensor q = fp8::quantize_mxfp8(ones({2, 40}));
         q.scales = q.scales.narrow(1, 0, 1);  // 40 columns need 2 blocks' scales
         fp8::dequantize_mxfp8(q, torch::kFloat);
       })}},
      {"Fp8TiledScales", "`fp8::dequantize_tiled: scale_inv of", {thrown([] {
         fp8::TiledTensor q = fp8::quantize_tiled(ones({2, 300}), 1, 128);
         q.scale_inv = q.scale_inv.narrow(1, 0, 2);  // 300 columns need 3 tiles' scales
         fp8::dequantize_tiled(q, torch::kFloat);
       })}},
      {"Fp8Reduction", "`fp8::Recipe: the amax reduction must leave", {thrown([] {
         fp8::Recipe recipe(fp8::RecipeOptions().amax_history_len(2));
         recipe.set_amax_reduction([](at::Tensor& amaxes) { amaxes = amaxes.to(torch::kDouble); });
         fp8::Linear lin(fp8::LinearOptions(2, 2).amax_history_len(2));
         { fp8::Autocast scope(recipe); lin(ones({1, 2})); }
         fp8::Autocast next(recipe);  // the update calls the reduction
       })}},
#endif
  };
  for (Trigger& r : reader_triggers()) t.push_back(std::move(r));
  return t;
}

// Rows that no trigger can reach in this build, each with its reason and the test that covers it.
std::vector<Untriggerable> untriggerable() {
  return {
      {"`mixprec: not enough memory to load",
       "a guard for a machine out of memory, for what another library throws, for strs of 4 GiB "
       "and pickles of 2^32 values, and for read errors and files that shrink while read: "
       "tests/fuzz holds every load to c10::Error"},
#ifndef MIXPREC_HAS_DISTRIBUTED
      {"`mixprec::distributed: all-reduce (MAX) of found_inf",
       "mixprec was built without its distributed code; DistributedTest (label dist) covers it"},
      {"`mixprec::distributed::found_inf_reducer: needs at least one",
       "mixprec was built without its distributed code"},
      {"`mixprec::distributed: all-reduce (MAX) of the FP8 amaxes",
       "mixprec was built without its distributed code; DistributedTest covers it"},
      {"`mixprec::distributed::fp8_amax_reduction: needs at least one",
       "mixprec was built without its distributed code"},
#endif
#if !MIXPREC_TORCH_FP8
      {"`fp8::quantize: expected Float8_e4m3fn", "LibTorch < 2.1: no float8 dtypes, no fp8 API"},
      {"`fp8::Recipe: amax_history_len must be", "LibTorch < 2.1"},
      {"`fp8::Linear: its amax_history has", "LibTorch < 2.1"},
      {"`fp8::dequantize_mxfp8: scales of shape", "LibTorch < 2.1"},
      {"`fp8::dequantize_tiled: scale_inv of", "LibTorch < 2.1"},
      {"`fp8::Recipe: the amax reduction must leave", "LibTorch < 2.1"},
#endif
  };
}

// The index of the row whose first column starts with `start`, or -1; fails unless exactly one.
int find_row(const std::vector<Row>& rows, const std::string& start) {
  int found = -1, count = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].cell.rfind(start, 0) == 0) found = static_cast<int>(i), ++count;
  }
  EXPECT_LE(count, 1) << "several rows of docs/errors.md start with " << start;
  return found;
}

TEST(ErrorsWalkTest, EveryRowOfErrorsMdHasATrigger) {
  const std::vector<Row> rows = read_rows();
  EXPECT_GE(rows.size(), 30u) << "docs/errors.md's tables were not found";
  std::vector<int> covered(rows.size(), 0);
  for (const Trigger& t : triggers()) {
    const int i = find_row(rows, t.row);
    if (i >= 0) ++covered[i];  // a trigger without a row fails its own test
  }
  for (const Untriggerable& u : untriggerable()) {
    const int i = find_row(rows, u.row);
    EXPECT_GE(i, 0) << "listed as untriggerable but not in docs/errors.md: " << u.row;
    if (i >= 0) ++covered[i];
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(covered[i], 1) << "docs/errors.md:" << rows[i].line << ": " << rows[i].cell
                             << "\nneeds exactly one trigger in tests/torch/errors_walk_test.cpp";
  }
}

class ErrorsWalkRowTest : public ::testing::TestWithParam<Trigger> {};

TEST_P(ErrorsWalkRowTest, IsTriggered) {
  const Trigger& t = GetParam();
  const std::vector<Row> rows = read_rows();
  const int i = find_row(rows, t.row);
  ASSERT_GE(i, 0) << "no row of docs/errors.md starts with " << t.row
                  << ": remove this trigger, or fix its row's start";
  const Row& row = rows[i];
  if (t.elsewhere) {
    const std::string why_not = t.elsewhere();
    if (!why_not.empty() && t.skip) GTEST_SKIP() << why_not;
    if (!why_not.empty()) return;  // `elsewhere` checked what happens instead
  }
  const bool behaviour = row.cell.rfind("(no error)", 0) == 0;
  if (!behaviour) {
    ASSERT_EQ(t.actions.size(), row.fragments.size())
        << "docs/errors.md:" << row.line << " has " << row.fragments.size()
        << " fragments; the trigger needs one action per fragment";
  }
  for (std::size_t k = 0; k < t.actions.size(); ++k) {
    const std::string message = t.actions[k]();
    if (behaviour) continue;  // the action checks the behaviour itself
    EXPECT_TRUE(matches(message, row.fragments[k]))
        << "docs/errors.md:" << row.line << ", fragment " << k + 1 << " of " << row.fragments.size()
        << "\n  documented: " << row.fragments[k] << "\n  got:        " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(ErrorsMd, ErrorsWalkRowTest, ::testing::ValuesIn(triggers()),
                         [](const ::testing::TestParamInfo<Trigger>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace mixprec
