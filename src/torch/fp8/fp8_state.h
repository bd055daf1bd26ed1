// Internal to mixprec's FP8 LibTorch part (src/torch/fp8/fp8.cpp, fp8_linear.cpp): the recipe's shared
// state (which delayed-scaling tensors were cast since the last update) and small helpers both
// files use. Not installed.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "mixprec/core/fp8.h"
#include "mixprec/fp8.h"

namespace mixprec::fp8::detail {

/// The core format of a float8 dtype; throws naming `who` for any other dtype.
core::Fp8Format to_core_format(at::ScalarType dtype, const char* who);

/// The float8 dtype of a core format.
at::ScalarType to_dtype(core::Fp8Format format);

/// The core's NaN policy of a public one.
core::NanAmax core_nan(NanAmax nan);

/// The core's settings of the delayed rule for these options.
core::DelayedScaling delayed_rule(const RecipeOptions& options);

/// Whether these options round scales to powers of two (power_of_2_scales, else the recipe's
/// default: on for rowwise and blockwise).
bool power_of_2(const RecipeOptions& options);

/// The core's settings of the current rule for these options (per tensor, row or tile).
core::CurrentScaling current_rule(const RecipeOptions& options);

/// The format of gradients under these options (E5M2 for kHybrid, else E4M3; E4M3 for MXFP8,
/// rowwise and blockwise).
core::Fp8Format grad_format(const RecipeOptions& options);

/// Current scaling's cast (core::quantize_fp8_current_): q of x with scale =
/// current_scale(amax(x)), written with its inverse to the 1-element float32 `scale` and
/// `scale_inv` (views into a module's buffers), which are left as they are for an empty x.
at::Tensor quantize_current(const at::Tensor& x, at::ScalarType fp8_dtype,
                            const core::CurrentScaling& rule, const at::Tensor& scale,
                            const at::Tensor& scale_inv);

/// Whether at::_scaled_mm on the CPU would run oneDNN's reference matmul (`ref:any`, ~25 million
/// multiply-adds a second) for operands of dtypes `a` and `b`, and fp8::Linear computes instead
/// what _scaled_mm computes without oneDNN (see fp8_linear.cpp's cpu_scaled_mm_without_onednn).
/// LibTorch 2.15 gives oneDNN same-dtype operands on a CPU with AMX-INT8, mixed ones on a CPU with
/// AMX-FP16 (aten/src/ATen/native/Blas.cpp, _scaled_mm_out_cpu, with oneDNN enabled); oneDNN 3.13
/// runs the former with its reference kernel where the CPU has no AMX-FP16 (Sapphire and Emerald
/// Rapids; ONEDNN_VERBOSE, uxlfoundation/oneDNN#3349). False before LibTorch 2.14 (no CPU
/// _scaled_mm) and off x86.
bool cpu_scaled_mm_is_onednn_reference(at::ScalarType a, at::ScalarType b);

/// A delayed-scaling tensor cast since the last update: column `column` of a module's
/// [L, 3] amax history, its [3] scale and scale_inv. The tensors are held, so a module freed
/// before the update is updated harmlessly in buffers nobody reads.
struct DelayedEntry {
  at::Tensor amax_history;
  at::Tensor scale;
  at::Tensor scale_inv;
  int column = 0;
  core::Fp8Format format = core::Fp8Format::kE4M3;
};

/// A recipe's state, shared by the copies of a Recipe and by the autograd nodes of the forwards
/// that ran under it (backward may run after the Recipe's scope, even after the Recipe).
struct RecipeState {
  explicit RecipeState(RecipeOptions opts) : options(std::move(opts)) {}

  const RecipeOptions options;

  /// Adds `entry` to the tensors of the next update, unless (its history, its column) is already
  /// there: each tensor is updated once per iteration, in first-cast order (the order of the
  /// amax reduction's tensor, which must be the same on every rank). Thread-safe (backward may
  /// run on LibTorch's device threads).
  void record(DelayedEntry entry);

  /// Takes the recorded entries, leaving none.
  std::vector<DelayedEntry> take();
  /// Puts entries taken by an update that failed before it changed anything back in front of
  /// those recorded since, so that a retry reduces and updates the same tensors (Note [An update
  /// whose collective throws]).
  void restore(std::vector<DelayedEntry> taken);

  /// NVFP4 stochastic rounding: the Philox counter offset of the next rounded cast (each cast
  /// takes its own, so no two draw the same bits; the same order of casts on every rank gives
  /// every rank the same offsets).
  std::uint64_t next_offset() { return offset_.fetch_add(1, std::memory_order_relaxed); }

  /// The amax reduction, or an empty function.
  std::function<void(at::Tensor&)> reduction();
  void set_reduction(std::function<void(at::Tensor&)> reduce);

 private:
  std::atomic<std::uint64_t> offset_{0};
  std::mutex mutex_;
  std::function<void(at::Tensor&)> reduce_;
  std::vector<DelayedEntry> entries_;
  std::set<std::pair<const void*, int>> recorded_;
};

}  // namespace mixprec::fp8::detail
