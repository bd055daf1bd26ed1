// mixprec::fp8 on LibTorch tensors (include/mixprec/fp8.h): the functional ops (api.md), MXFP8,
// the recipes and the Autocast scope. Argument checks in PyTorch's words, then the core's FP8
// kernels (mixprec/core/fp8.h) through detail::on_device; no per-element LibTorch ops.
#include "mixprec/fp8.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <utility>
#include <vector>

#include "mixprec/core/fp8.h"
#include "torch/fp8/fp8_state.h"
#include "torch/views.h"

namespace mixprec::fp8 {
namespace detail {

core::Fp8Format to_core_format(at::ScalarType dtype, const char* who) {
  if (dtype == at::kFloat8_e4m3fn) return core::Fp8Format::kE4M3;
  if (dtype == at::kFloat8_e5m2) return core::Fp8Format::kE5M2;
  TORCH_CHECK(false, who, ": expected Float8_e4m3fn or Float8_e5m2, got ", dtype,
              " (the fp8 formats of LibTorch that mixprec casts to and from)");
  return core::Fp8Format::kE4M3;  // unreachable
}

at::ScalarType to_dtype(core::Fp8Format format) {
  return format == core::Fp8Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

core::NanAmax core_nan(NanAmax nan) {
  return nan == NanAmax::kIgnore ? core::NanAmax::kIgnore : core::NanAmax::kPropagate;
}

core::DelayedScaling delayed_rule(const RecipeOptions& options) {
  core::DelayedScaling rule;
  rule.history_len = options.amax_history_len();
  rule.algo = options.amax_compute_algo() == AmaxAlgo::kMax ? core::AmaxAlgo::kMax
                                                            : core::AmaxAlgo::kMostRecent;
  rule.margin = options.margin();
  rule.nan = core_nan(options.nan_amax());
  return rule;
}

bool power_of_2(const RecipeOptions& options) {
  return options.power_of_2_scales().value_or(options.scaling() == Scaling::kRowwise ||
                                              options.scaling() == Scaling::kBlockwise);
}

core::CurrentScaling current_rule(const RecipeOptions& options) {
  core::CurrentScaling rule;
  rule.eps = options.scaling() == Scaling::kBlockwise ? 0.0f : static_cast<float>(options.eps());
  rule.power_of_2_scales = power_of_2(options);
  rule.nan = core_nan(options.nan_amax());
  return rule;
}

core::Fp8Format grad_format(const RecipeOptions& options) {
  const Scaling s = options.scaling();
  const bool e4m3_only = s == Scaling::kMxfp8 || s == Scaling::kRowwise || s == Scaling::kBlockwise;
  return !e4m3_only && options.format() == Format::kHybrid ? core::Fp8Format::kE5M2
                                                           : core::Fp8Format::kE4M3;
}

void RecipeState::record(DelayedEntry entry) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!recorded_.emplace(entry.amax_history.unsafeGetTensorImpl(), entry.column).second) return;
  entries_.push_back(std::move(entry));
}

std::vector<DelayedEntry> RecipeState::take() {
  const std::lock_guard<std::mutex> lock(mutex_);
  recorded_.clear();
  return std::exchange(entries_, {});
}

void RecipeState::restore(std::vector<DelayedEntry> taken) {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<DelayedEntry> since = std::exchange(entries_, {});
  recorded_.clear();
  for (auto* part : {&taken, &since}) {
    for (DelayedEntry& e : *part) {
      if (recorded_.emplace(e.amax_history.unsafeGetTensorImpl(), e.column).second) {
        entries_.push_back(std::move(e));
      }
    }
  }
}

std::function<void(at::Tensor&)> RecipeState::reduction() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return reduce_;
}

void RecipeState::set_reduction(std::function<void(at::Tensor&)> reduce) {
  const std::lock_guard<std::mutex> lock(mutex_);
  reduce_ = std::move(reduce);
}

}  // namespace detail

namespace {

/// Checks a 1-element float32 tensor on `device` (a scale, scale_inv or amax slot), in the words
/// of functional.cpp's checks.
void check_scalar(const at::Tensor& t, const char* who, const char* name,
                  const c10::Device& device) {
  TORCH_CHECK(t.defined(), who, ": ", name, " must be a defined tensor.");
  TORCH_CHECK(t.numel() == 1, who, ": ", name, " must be a 1-element tensor, got ", t.numel(),
              " elements.");
  TORCH_CHECK(t.scalar_type() == at::kFloat, who, ": ", name, " must be a float tensor, got ",
              t.scalar_type(), ".");
  TORCH_CHECK(t.device() == device,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              device, " and ", t.device(), "! (", who, ": ", name, ")");
}

/// x checked for a float dtype and a supported device, and made dense.
at::Tensor dense_input(const at::Tensor& x, const char* who) {
  TORCH_CHECK(x.defined(), who, ": expected a defined tensor");
  mixprec::detail::to_core_dtype(x.scalar_type(), who);
  mixprec::detail::to_core_device(x.device(), who);
  return x.is_non_overlapping_and_dense() ? x : x.contiguous();
}

std::uint8_t* bytes(const at::Tensor& t) { return static_cast<std::uint8_t*>(t.data_ptr()); }

}  // namespace

// ---- Functional ops ---------------------------------------------------------------------------

at::Tensor amax(const at::Tensor& x) {
  constexpr const char* kWho = "fp8::amax";
  const at::Tensor dense = dense_input(x, kWho);
  at::Tensor out = at::zeros({}, x.options().dtype(at::kFloat));
  if (dense.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(dense, kWho);
  mixprec::detail::on_device(
      x.device(), [&](void* stream) { core::amax_(view, out.data_ptr<float>(), stream); });
  return out;
}

namespace {

at::Tensor quantize_impl(const at::Tensor& x, const at::Tensor& scale, at::ScalarType fp8_dtype,
                         const at::Tensor* amax_slot, NanAmax nan, const char* who) {
  const core::Fp8Format format = detail::to_core_format(fp8_dtype, who);
  TORCH_CHECK(x.defined(), who, ": expected a defined tensor");
  check_scalar(scale, who, "scale", x.device());
  if (amax_slot != nullptr) check_scalar(*amax_slot, who, "amax_slot", x.device());
  // Contiguous, so q (contiguous, x's shape) holds the elements in the view's order.
  const at::Tensor input = dense_input(x, who).contiguous();
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(fp8_dtype));
  if (input.numel() == 0) return q;
  const core::TensorView view = mixprec::detail::to_view(input, who);
  float* slot = amax_slot != nullptr ? amax_slot->data_ptr<float>() : nullptr;
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_fp8_(view, bytes(q), format, scale.data_ptr<float>(), slot, stream,
                        detail::core_nan(nan));
  });
  if (amax_slot != nullptr) mixprec::detail::bump_version(*amax_slot);
  return q;
}

}  // namespace

at::Tensor quantize(const at::Tensor& x, const at::Tensor& scale, at::ScalarType fp8_dtype) {
  return quantize_impl(x, scale, fp8_dtype, nullptr, NanAmax::kPropagate, "fp8::quantize");
}

at::Tensor quantize_and_record_amax(const at::Tensor& x, const at::Tensor& scale,
                                    at::ScalarType fp8_dtype, const at::Tensor& amax_slot,
                                    NanAmax nan) {
  return quantize_impl(x, scale, fp8_dtype, &amax_slot, nan, "fp8::quantize_and_record_amax");
}

at::Tensor detail::quantize_current(const at::Tensor& x, at::ScalarType fp8_dtype,
                                    const core::CurrentScaling& rule, const at::Tensor& scale,
                                    const at::Tensor& scale_inv) {
  constexpr const char* kWho = "fp8::quantize_current";
  const core::Fp8Format format = to_core_format(fp8_dtype, kWho);
  check_scalar(scale, kWho, "scale", x.device());
  check_scalar(scale_inv, kWho, "scale_inv", x.device());
  const at::Tensor input = dense_input(x, kWho).contiguous();
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(fp8_dtype));
  if (input.numel() == 0) return q;
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  at::Tensor amax = at::empty({}, x.options().dtype(at::kFloat));
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_fp8_current_(view, bytes(q), format, rule, scale.data_ptr<float>(),
                                scale_inv.data_ptr<float>(), amax.data_ptr<float>(), stream);
  });
  mixprec::detail::bump_version(scale);
  mixprec::detail::bump_version(scale_inv);
  return q;
}

at::Tensor dequantize(const at::Tensor& q, const at::Tensor& scale_inv, at::ScalarType out_dtype) {
  constexpr const char* kWho = "fp8::dequantize";
  TORCH_CHECK(q.defined(), kWho, ": expected a defined tensor");
  const core::Fp8Format format = detail::to_core_format(q.scalar_type(), kWho);
  check_scalar(scale_inv, kWho, "scale_inv", q.device());
  at::Tensor out = at::empty(q.sizes(), q.options().dtype(out_dtype));
  const core::TensorView view = mixprec::detail::to_view(out, kWho);  // checks out_dtype first
  if (q.numel() == 0) return out;
  const at::Tensor input = q.contiguous();
  mixprec::detail::on_device(q.device(), [&](void* stream) {
    core::dequantize_fp8_(bytes(input), format, scale_inv.data_ptr<float>(), view, stream);
  });
  return out;
}

// ---- MXFP8 --------------------------------------------------------------------------------------

namespace {
constexpr std::int64_t kMxBlock = 32;

std::vector<std::int64_t> scales_shape(at::IntArrayRef sizes) {
  std::vector<std::int64_t> shape(sizes.begin(), sizes.end());
  shape.back() = (shape.back() + kMxBlock - 1) / kMxBlock;
  return shape;
}
}  // namespace

MxTensor quantize_mxfp8(const at::Tensor& x, at::ScalarType fp8_dtype, NanAmax nan) {
  constexpr const char* kWho = "fp8::quantize_mxfp8";
  const core::Fp8Format format = detail::to_core_format(fp8_dtype, kWho);
  TORCH_CHECK(x.defined(), kWho, ": expected a defined tensor");
  TORCH_CHECK(x.dim() >= 1, kWho,
              ": expected a tensor of at least one dimension (blocks run "
              "along the last one), got a 0-dim tensor");
  const at::Tensor input = dense_input(x, kWho).contiguous();
  MxTensor out{at::empty(x.sizes(), x.options().dtype(fp8_dtype)),
               at::empty(scales_shape(x.sizes()), x.options().dtype(at::kByte))};
  if (input.numel() == 0) return out;
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  const std::int64_t cols = x.size(-1);
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_mxfp8_(view, cols, bytes(out.data), bytes(out.scales), format, stream,
                          detail::core_nan(nan));
  });
  return out;
}

at::Tensor dequantize_mxfp8(const MxTensor& q, at::ScalarType out_dtype) {
  constexpr const char* kWho = "fp8::dequantize_mxfp8";
  TORCH_CHECK(q.data.defined() && q.scales.defined(), kWho,
              ": expected defined data and scales tensors");
  const core::Fp8Format format = detail::to_core_format(q.data.scalar_type(), kWho);
  TORCH_CHECK(q.data.dim() >= 1, kWho, ": expected data of at least one dimension");
  TORCH_CHECK(q.scales.scalar_type() == at::kByte, kWho,
              ": expected scales of dtype Byte (E8M0 exponents), got ", q.scales.scalar_type());
  const std::vector<std::int64_t> expected = scales_shape(q.data.sizes());
  TORCH_CHECK(q.scales.sizes() == at::IntArrayRef(expected), kWho, ": scales of shape ",
              q.scales.sizes(), " do not fit data of shape ", q.data.sizes(), " (expected ",
              at::IntArrayRef(expected), ": one per block of 32 along the last dimension)");
  TORCH_CHECK(q.scales.device() == q.data.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              q.data.device(), " and ", q.scales.device(), "! (", kWho, ": scales)");
  at::Tensor out = at::empty(q.data.sizes(), q.data.options().dtype(out_dtype));
  const core::TensorView view = mixprec::detail::to_view(out, kWho);
  if (out.numel() == 0) return out;
  const at::Tensor data = q.data.contiguous();
  const at::Tensor scales = q.scales.contiguous();
  const std::int64_t cols = q.data.size(-1);
  mixprec::detail::on_device(out.device(), [&](void* stream) {
    core::dequantize_mxfp8_(bytes(data), bytes(scales), cols, format, view, stream);
  });
  return out;
}

// ---- Tiles --------------------------------------------------------------------------------------

TiledTensor quantize_tiled(const at::Tensor& x, std::int64_t tile_rows, std::int64_t tile_cols,
                           at::ScalarType fp8_dtype, bool power_of_2_scales, double eps,
                           NanAmax nan) {
  constexpr const char* kWho = "fp8::quantize_tiled";
  const core::Fp8Format format = detail::to_core_format(fp8_dtype, kWho);
  TORCH_CHECK(x.defined(), kWho, ": expected a defined tensor");
  TORCH_CHECK(x.dim() >= 1, kWho,
              ": expected a tensor of at least one dimension (its rows run along the last one), "
              "got a 0-dim tensor");
  TORCH_CHECK(tile_rows >= 1 && tile_cols >= 1, kWho, ": tiles must be at least 1 x 1, got ",
              tile_rows, " x ", tile_cols);
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, kWho, ": eps must be finite and >= 0, got ", eps);
  const at::Tensor input = dense_input(x, kWho).contiguous();
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  TiledTensor out{
      at::empty(x.sizes(), x.options().dtype(fp8_dtype)),
      at::empty({(rows + tile_rows - 1) / tile_rows, (cols + tile_cols - 1) / tile_cols},
                x.options().dtype(at::kFloat)),
      tile_rows, tile_cols};
  if (input.numel() == 0) return out;
  core::CurrentScaling rule;
  rule.eps = static_cast<float>(eps);
  rule.power_of_2_scales = power_of_2_scales;
  rule.nan = detail::core_nan(nan);
  const core::TensorView view = mixprec::detail::to_view(input, kWho);
  mixprec::detail::on_device(x.device(), [&](void* stream) {
    core::quantize_fp8_tiles_(view, cols, tile_rows, tile_cols, bytes(out.data),
                              out.scale_inv.data_ptr<float>(), format, rule, stream);
  });
  return out;
}

at::Tensor dequantize_tiled(const TiledTensor& q, at::ScalarType out_dtype) {
  constexpr const char* kWho = "fp8::dequantize_tiled";
  TORCH_CHECK(q.data.defined() && q.scale_inv.defined(), kWho,
              ": expected defined data and scale_inv tensors");
  const core::Fp8Format format = detail::to_core_format(q.data.scalar_type(), kWho);
  TORCH_CHECK(q.data.dim() >= 1, kWho, ": expected data of at least one dimension");
  TORCH_CHECK(q.tile_rows >= 1 && q.tile_cols >= 1, kWho, ": tiles must be at least 1 x 1, got ",
              q.tile_rows, " x ", q.tile_cols);
  const std::int64_t cols = q.data.size(-1), rows = cols == 0 ? 0 : q.data.numel() / cols;
  const std::vector<std::int64_t> expected = {(rows + q.tile_rows - 1) / q.tile_rows,
                                              (cols + q.tile_cols - 1) / q.tile_cols};
  TORCH_CHECK(
      q.scale_inv.scalar_type() == at::kFloat && q.scale_inv.sizes() == at::IntArrayRef(expected),
      kWho, ": scale_inv of ", q.scale_inv.scalar_type(), " ", q.scale_inv.sizes(),
      " does not fit data of shape ", q.data.sizes(), " in tiles of ", q.tile_rows, " x ",
      q.tile_cols, " (expected float32 ", at::IntArrayRef(expected), ")");
  TORCH_CHECK(q.scale_inv.device() == q.data.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              q.data.device(), " and ", q.scale_inv.device(), "! (", kWho, ": scale_inv)");
  at::Tensor out = at::empty(q.data.sizes(), q.data.options().dtype(out_dtype));
  const core::TensorView view = mixprec::detail::to_view(out, kWho);
  if (out.numel() == 0) return out;
  const at::Tensor data = q.data.contiguous();
  const at::Tensor scale_inv = q.scale_inv.contiguous();
  mixprec::detail::on_device(out.device(), [&](void* stream) {
    core::dequantize_fp8_tiles_(bytes(data), scale_inv.data_ptr<float>(), cols, q.tile_rows,
                                q.tile_cols, format, view, stream);
  });
  return out;
}

// ---- Recipe -------------------------------------------------------------------------------------

namespace {

RecipeOptions validated(RecipeOptions options) {
  constexpr const char* kWho = "fp8::Recipe";
  TORCH_CHECK(options.amax_history_len() >= 1, kWho, ": amax_history_len must be >= 1, got ",
              options.amax_history_len());
  // The core's range (delayed_scale divides by 2^margin, a normal float32), checked here at
  // construction rather than at the first update.
  TORCH_CHECK(options.margin() >= core::kMinMargin && options.margin() <= core::kMaxMargin, kWho,
              ": margin must be in [", core::kMinMargin, ", ", core::kMaxMargin,
              "] (the scale is divided by 2^margin), got ", options.margin());
  TORCH_CHECK(std::isfinite(options.eps()) && static_cast<float>(options.eps()) > 0.0f, kWho,
              ": eps must be finite and > 0 in float32 (amaxes below it count as it), got ",
              options.eps());
  return options;
}

}  // namespace

Recipe::Recipe(RecipeOptions options)
    : state_(std::make_shared<detail::RecipeState>(validated(std::move(options)))) {}

const RecipeOptions& Recipe::options() const { return state_->options; }

void Recipe::set_amax_reduction(std::function<void(at::Tensor&)> reduce) {
  state_->set_reduction(std::move(reduce));
}

// Note [One update per iteration, only the tensors that were cast]
// TE's DelayedScaling updates every FP8 tensor's history and scale once per iteration, in one
// batched kernel after one all-reduce of the iteration's amaxes. TE before PR #825 rolled every
// registered history, also of modules that did not run in the iteration (a layer skipped under
// gradient accumulation, or a branch not taken), which shifted their windows with zeros and
// changed their scales. Here the casts record which (history, column) they wrote since the last
// update (RecipeState::record), and only those are reduced, updated and rolled.
// Note [An update whose collective throws]
// The amax reduction is a collective (an all-reduce across ranks) and may throw: a timeout, a
// peer gone. It runs on a copy of the iteration's amaxes, so nothing has changed yet when it
// throws; the tensors taken for the update are put back (RecipeState::restore), and the next
// update (a retry, or the next iteration's) reduces the same amaxes, in the same order, on every
// rank. Dropping them instead would give the ranks different scales from then on.
void Recipe::update() {
  std::vector<detail::DelayedEntry> entries = state_->take();
  if (entries.empty()) return;
  c10::NoGradGuard no_grad;
  if (const auto reduce = state_->reduction()) {
    at::Tensor amaxes;
    try {
      // Every slot-0 amax in one float32 tensor (first-cast order) on the first tensor's device,
      // reduced by the caller's collective.
      const c10::Device device = entries.front().amax_history.device();
      std::vector<at::Tensor> slots;
      slots.reserve(entries.size());
      for (const auto& e : entries) {
        slots.push_back(mixprec::detail::to_device(e.amax_history[0][e.column], device));
      }
      amaxes = at::stack(slots);
      reduce(amaxes);
      TORCH_CHECK(amaxes.scalar_type() == at::kFloat &&
                      amaxes.numel() == static_cast<std::int64_t>(entries.size()),
                  "fp8::Recipe: the amax reduction must leave its float32 tensor of ",
                  entries.size(), " amaxes in place, got ", amaxes.numel(), " of ",
                  amaxes.scalar_type());
    } catch (...) {
      state_->restore(std::move(entries));
      throw;
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      entries[i].amax_history[0][entries[i].column].copy_(amaxes[static_cast<std::int64_t>(i)]);
    }
  }
  // One batched core call per device (a model may span devices), in first-cast order.
  const core::DelayedScaling rule = detail::delayed_rule(options());
  std::vector<bool> done(entries.size(), false);
  for (std::size_t first = 0; first < entries.size(); ++first) {
    if (done[first]) continue;
    const c10::Device device = entries[first].amax_history.device();
    std::vector<core::DelayedTensor> tensors;
    for (std::size_t i = first; i < entries.size(); ++i) {
      const detail::DelayedEntry& e = entries[i];
      if (done[i] || e.amax_history.device() != device) continue;
      done[i] = true;
      core::DelayedTensor t;
      t.amax_history = e.amax_history.data_ptr<float>() + e.column;
      t.stride = e.amax_history.stride(0);
      t.scale = e.scale.data_ptr<float>() + e.column;
      t.scale_inv = e.scale_inv.data_ptr<float>() + e.column;
      t.format = e.format;
      tensors.push_back(t);
      mixprec::detail::bump_version(e.amax_history);
      mixprec::detail::bump_version(e.scale);
      mixprec::detail::bump_version(e.scale_inv);
    }
    const core::Device core_device = mixprec::detail::to_core_device(device, "fp8::Recipe::update");
    mixprec::detail::on_device(device, [&](void* stream) {
      core::delayed_scaling_update_(tensors.data(), tensors.size(), rule, core_device, stream);
    });
  }
}

// ---- Autocast -----------------------------------------------------------------------------------

namespace {
thread_local Autocast* innermost = nullptr;
}  // namespace

Autocast::Autocast(Recipe& recipe) : recipe_(&recipe), outer_(innermost) {
  // A nested scope of the same recipe (copies share its state) is the same iteration: TE's
  // fp8_autocast reduces and updates only when its outermost scope ends.
  bool nested = false;
  for (const Autocast* a = outer_; a != nullptr && !nested; a = a->outer_) {
    nested = a->recipe_->state() == recipe.state();
  }
  // TE's fp8_autocast updates only with grad enabled: an eval scope neither rolls nor rescales.
  if (!nested && at::GradMode::is_enabled()) recipe.update();
  innermost = this;
}

Autocast::~Autocast() { innermost = outer_; }

Recipe* Autocast::current() { return innermost == nullptr ? nullptr : innermost->recipe_; }

}  // namespace mixprec::fp8
