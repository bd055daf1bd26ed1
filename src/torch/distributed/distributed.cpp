// mixprec::distributed: the found_inf reducer, the FP8 amax reduction and the cross-rank grad norm
// (grad_norm_reducer, clip_grad_norm_) on c10d process groups, and a Gloo convenience.
// The only file of mixprec that includes c10d's Gloo headers, so users of mixprec/distributed.h
// never see them.
#include "mixprec/distributed.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "torch/ops/clip_detail.h"

namespace mixprec {
namespace distributed {
namespace {

// What is reduced, for the error messages: the tensor's name and what the ranks must agree on.
struct Reduced {
  const char* name;
  const char* order;
};
constexpr Reduced kFoundInf{"found_inf", "call unscale_/step for the same optimizers"};
constexpr Reduced kFp8Amax{"the FP8 amaxes", "cast the same FP8 tensors"};
constexpr Reduced kGradNorm{"the grad norm's power and found_inf",
                            "call clip_grad_norm_ for the same optimizers"};
constexpr Reduced kClipNorm{"the grad norm's power", "call clip_grad_norm_"};

// One collective per group, in order: MAX keeps found_inf 0 or 1 (PyTorch's ShardedGradScaler
// sums instead, which counts ranks; FSDP2/DTensor reduces with MAX), and gives the FP8 amaxes of
// every rank (TE's reduce_amax); SUM adds the shards' sum |g|^p (FSDP1's clip_grad_norm_).
// Templated so LibTorch 2.x's c10d::Backend takes the same path as c10d::ProcessGroup.
template <typename Group>
void all_reduce_impl(at::Tensor& values, const std::vector<c10::intrusive_ptr<Group>>& groups,
                     const Reduced& what, bool sum = false, bool nan_as_inf = false) {
  TORCH_CHECK(values.defined(), "mixprec::distributed: ", what.name, " is an undefined tensor");
  // c10d needs a dense contiguous tensor; the scaler's 0-dim found_inf always is one, and so is
  // the recipe's concatenation of amaxes.
  at::Tensor buffer = values.is_contiguous() ? values : values.contiguous();
  if (nan_as_inf) {
    // NCCL's MAX drops NaN, and so does Gloo's (tests/dist: a NaN on one rank came back as the
    // others' max): as +inf it reaches every rank. MS-AMP does the same before its all-reduce
    // (msamp/common/tensor/meta.py). A tensor op, so no host sync for a CUDA tensor; nan_to_num_
    // would also rewrite +-inf.
    buffer.masked_fill_(at::isnan(buffer), std::numeric_limits<double>::infinity());
  }
  std::vector<at::Tensor> tensors{buffer};
  c10d::AllreduceOptions options;
  options.reduceOp = sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& group = groups[i];
    try {
      group->allreduce(tensors, options)->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "mixprec::distributed: all-reduce (", sum ? "SUM" : "MAX", ") of ",
                  what.name, " over process group ", i, " of ", groups.size(), " (",
                  group->getBackendName(), ", rank ", group->getRank(), " of ", group->getSize(),
                  ") failed: ", e.what(),
                  "\nAnother rank may have died or stalled past the group's timeout, or the ranks "
                  "did not ",
                  what.order, " in the same order.");
    }
  }
  if (!buffer.is_same(values)) values.copy_(buffer);
}

template <typename Group>
void check_groups(const std::vector<c10::intrusive_ptr<Group>>& groups,
                  const char* function = "found_inf_reducer") {
  TORCH_CHECK(!groups.empty(), "mixprec::distributed::", function,
              ": needs at least one process group, got none (a single process needs no "
              "reducer)");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    TORCH_CHECK(groups[i], "mixprec::distributed::", function, ": process group ", i, " is null");
  }
}

// The norms whose shards combine in one collective: sum |g|^p for a finite p > 0, max |g| for inf.
void check_norm_type(double norm_type, const char* function) {
  TORCH_CHECK(norm_type > 0.0,  // false for NaN
              "mixprec::distributed::", function,
              ": norm_type must be 2, inf or another finite p > 0 (the shards' norms combine as "
              "the sum of |g|^p, or the max of |g| for inf), got ",
              norm_type);
}

}  // namespace

void all_reduce_max_(at::Tensor& found_inf, const std::vector<ProcessGroupPtr>& groups) {
  all_reduce_impl(found_inf, groups, kFoundInf);
}

GradScaler::FoundInfReducer found_inf_reducer(std::vector<ProcessGroupPtr> groups) {
  check_groups(groups);
  return [groups = std::move(groups)](at::Tensor& found_inf) {
    all_reduce_impl(found_inf, groups, kFoundInf);
  };
}

GradScaler::FoundInfReducer found_inf_reducer(ProcessGroupPtr group) {
  return found_inf_reducer(std::vector<ProcessGroupPtr>{std::move(group)});
}

std::function<void(at::Tensor&)> fp8_amax_reduction(std::vector<ProcessGroupPtr> groups) {
  check_groups(groups, "fp8_amax_reduction");
  return [groups = std::move(groups)](at::Tensor& amaxes) {
    TORCH_CHECK(!amaxes.defined() || at::isFloatingType(amaxes.scalar_type()),
                "mixprec::distributed::fp8_amax_reduction: the amaxes must be a floating-point "
                "tensor (float32 from fp8::Recipe), got ",
                amaxes.scalar_type());
    // No amax cast since the last update on this rank: none on any rank, as every rank casts the
    // same tensors; no collective, as the recipe calls no reduction then either.
    if (amaxes.defined() && amaxes.numel() == 0) return;
    all_reduce_impl(amaxes, groups, kFp8Amax, /*sum=*/false, /*nan_as_inf=*/true);
  };
}

std::function<void(at::Tensor&)> fp8_amax_reduction(ProcessGroupPtr group) {
  return fp8_amax_reduction(std::vector<ProcessGroupPtr>{std::move(group)});
}

GradScaler::GradNormReducer grad_norm_reducer(ProcessGroupPtr group) {
  std::vector<ProcessGroupPtr> groups{std::move(group)};
  check_groups(groups, "grad_norm_reducer");
  return [groups = std::move(groups)](at::Tensor& power_and_found, double norm_type) {
    check_norm_type(norm_type, "grad_norm_reducer");
    TORCH_CHECK(power_and_found.defined(),
                "mixprec::distributed::grad_norm_reducer: got an undefined tensor");
    TORCH_CHECK(power_and_found.numel() == 2 && at::isFloatingType(power_and_found.scalar_type()),
                "mixprec::distributed::grad_norm_reducer: expects GradScaler::clip_grad_norm_'s "
                "2-element floating-point tensor [power, found_inf], got one of shape ",
                power_and_found.sizes(), " and dtype ", power_and_found.scalar_type());
    // p = inf: max |u| and found_inf both combine with MAX (NaN as +inf: NCCL and Gloo drop it).
    // Finite p: sum |u|^p adds up; found_inf then counts the ranks that saw inf/NaN, and the
    // scaler skips on any non-zero count.
    const bool inf = std::isinf(norm_type);
    all_reduce_impl(power_and_found, groups, kGradNorm, /*sum=*/!inf, /*nan_as_inf=*/inf);
  };
}

at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           ProcessGroupPtr group, double norm_type, bool error_if_nonfinite) {
  TORCH_CHECK(group, "mixprec::distributed::clip_grad_norm_: the process group is null");
  check_norm_type(norm_type, "clip_grad_norm_");
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  std::optional<c10::Device> device;  // of the first grad, else of the first parameter
  for (const at::Tensor& p : parameters) {
    if (!p.defined()) continue;
    if (p.grad().defined()) {
      if (grads.empty()) device = p.grad().device();
      grads.push_back(p.grad());
    } else if (!device) {
      device = p.device();
    }
  }
  // This rank's shard: sum |g|^p (max |g| for inf) in double; a zero on the CPU without grads.
  at::Tensor power = detail::grad_norm(grads, norm_type, at::Tensor(), false).power;
  if (device) power = power.to(*device);
  const bool inf = std::isinf(norm_type);
  at::Tensor buffer = power.to(at::kDouble).reshape({1});
  if (inf) {
    // MAX drops NaN (NCCL, Gloo) and NaN-as-inf would make the norm inf where one process gets
    // NaN: a flag beside it, in the same collective, brings the NaN back.
    buffer = at::cat({buffer, at::isnan(buffer).to(at::kDouble)});
  }
  std::vector<ProcessGroupPtr> groups{std::move(group)};
  all_reduce_impl(buffer, groups, kClipNorm, /*sum=*/!inf, /*nan_as_inf=*/inf);
  at::Tensor total = buffer[0];
  if (inf) {
    const at::Tensor nan = at::full({}, std::numeric_limits<double>::quiet_NaN(), total.options());
    total = at::where(buffer[1] != 0, nan, total);
  }
  const at::Tensor norm = detail::norm_from_power(total, norm_type);
  if (error_if_nonfinite && !std::isfinite(norm.item<float>())) {  // the one sync
    detail::throw_nonfinite_norm(norm_type);
  }
  if (!grads.empty()) {
    detail::unscale_and_clip(grads, at::Tensor(), detail::clip_coefficient(max_norm, norm));
  }
  return norm;
}

#if MIXPREC_TORCH_2
GradScaler::FoundInfReducer found_inf_reducer_for_backends(
    std::vector<c10::intrusive_ptr<c10d::Backend>> backends) {
  check_groups(backends);
  return [backends = std::move(backends)](at::Tensor& found_inf) {
    all_reduce_impl(found_inf, backends, kFoundInf);
  };
}
#endif

ProcessGroupPtr make_gloo_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int world_size, std::chrono::milliseconds timeout,
                                        const std::string& hostname) {
  TORCH_CHECK(store, "mixprec::distributed::make_gloo_process_group: store is null");
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
              "mixprec::distributed::make_gloo_process_group: needs 0 <= rank < world_size, got "
              "rank ",
              rank, " and world_size ", world_size);
  TORCH_CHECK(timeout.count() > 0,
              "mixprec::distributed::make_gloo_process_group: timeout must be > 0 ms, got ",
              timeout.count());
#ifdef USE_C10D_GLOO
  // Gloo's rendezvous waits on the store with the store's timeout: bound it the same way.
  store->setTimeout(timeout);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(hostname.empty()
                                 ? c10d::ProcessGroupGloo::createDefaultDevice()
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
#if MIXPREC_TORCH_2
  // LibTorch 2.x split c10d::ProcessGroup (the dispatcher) from c10d::Backend (ProcessGroupGloo):
  // wrap the backend in a group serving CPU (and CUDA tensors, which Gloo also reduces).
#if MIXPREC_TORCH_PROCESS_GROUP_WITHOUT_OPTIONS
  // LibTorch 2.6 dropped ProcessGroup::Options from the constructor.
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#else
  auto group = c10::make_intrusive<c10d::ProcessGroup>(
      store, rank, world_size, c10::make_intrusive<c10d::ProcessGroup::Options>("gloo", timeout));
#endif
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
  return group;
#else
  // LibTorch 1.13: ProcessGroupGloo is itself a c10d::ProcessGroup.
  return gloo;
#endif
#else
  (void)hostname;
  TORCH_CHECK(false,
              "mixprec::distributed::make_gloo_process_group: this LibTorch was built without "
              "Gloo (USE_C10D_GLOO is not defined); build the process group yourself, e.g. "
              "c10d::ProcessGroupNCCL, and pass it to found_inf_reducer");
#endif
}

}  // namespace distributed
}  // namespace mixprec
