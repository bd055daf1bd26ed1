// The LibTorch version conditions of mixprec, in one place: each macro names the difference it
// guards, so a workaround can be found and deleted when its oldest LibTorch is no longer supported.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR

/// 1 when the LibTorch compiled against is MAJOR.MINOR or newer, else 0 (usable in `#if`).
#define MIXPREC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch 2.0: c10d::Backend (ProcessGroupGloo, ProcessGroupNCCL) split from the dispatching
/// c10d::ProcessGroup; Optimizer::zero_grad() sets grads to undefined by default; optimizer state
/// keyed differently (tests/torch/optim_checkpoint_test.cpp); at::_fused_adamw_ on CUDA.
#define MIXPREC_TORCH_2 MIXPREC_TORCH_AT_LEAST(2, 0)
/// LibTorch 2.1: float8 dtypes (at::kFloat8_e4m3fn, at::kFloat8_e5m2), and so mixprec/fp8.h
/// (CMakeLists.txt builds its sources from the same version: MIXPREC_WITH_FP8).
#define MIXPREC_TORCH_FP8 MIXPREC_TORCH_AT_LEAST(2, 1)
/// LibTorch 2.8: the packed 4-bit dtype at::kFloat4_e2m1fn_x2 (pytorch/pytorch#148791; 2.7.1 has
/// none), mixprec/fp4.h's packed data; before it, that data is at::kByte.
#define MIXPREC_TORCH_FLOAT4 MIXPREC_TORCH_AT_LEAST(2, 8)
/// LibTorch 2.2: CPU autocast takes float16 (1.13 knows only bfloat16).
#define MIXPREC_TORCH_CPU_FP16_AUTOCAST MIXPREC_TORCH_AT_LEAST(2, 2)
/// LibTorch 2.4: the autocast functions take a DeviceType (set_autocast_enabled(device, on), ...)
/// instead of one function per device (set_enabled, set_cpu_enabled, ...).
#define MIXPREC_TORCH_DEVICE_AUTOCAST_API MIXPREC_TORCH_AT_LEAST(2, 4)
/// LibTorch 2.4: PyTorch's own CPU AMP kernels (at::_amp_foreach_non_finite_check_and_unscale_,
/// at::_amp_update_scale_) and fused CPU optimizers (at::_fused_sgd_, _fused_adam_, _fused_adamw_),
/// the references of the differential tests and the benchmarks.
#define MIXPREC_TORCH_CPU_AMP_KERNELS MIXPREC_TORCH_AT_LEAST(2, 4)
/// LibTorch 2.6: c10d::ProcessGroup's constructor no longer takes ProcessGroup::Options.
#define MIXPREC_TORCH_PROCESS_GROUP_WITHOUT_OPTIONS MIXPREC_TORCH_AT_LEAST(2, 6)

// PyTorch's Python text and layouts, which mixprec follows for the LibTorch it is built against
// (docs/python_to_cpp.md, "What changed in PyTorch since 2.6"; read in each release's wheel).

/// PyTorch 2.7: Adam's param groups carry "decoupled_weight_decay" (AdamW, now an Adam subclass,
/// always True), in state_dict() too.
#define MIXPREC_TORCH_DECOUPLED_WEIGHT_DECAY MIXPREC_TORCH_AT_LEAST(2, 7)
/// PyTorch 2.9: GradScaler.update(new_scale)'s message is one sentence; before, a backslash line
/// continuation inside the string left a run of spaces after "FloatTensor or".
#define MIXPREC_TORCH_UPDATE_REASON_IN_ONE_LINE MIXPREC_TORCH_AT_LEAST(2, 9)
/// PyTorch 2.10: torch.autocast("cuda") without CUDA warns "CUDA is not available or torch_xla is
/// imported. Disabling autocast." (before: "User provided device_type of 'cuda', but CUDA is not
/// available. Disabling").
#define MIXPREC_TORCH_AUTOCAST_WARNING_NAMES_XLA MIXPREC_TORCH_AT_LEAST(2, 10)
