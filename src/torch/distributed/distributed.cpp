// mixprec::distributed: the found_inf reducer and the FP8 amax reduction on c10d process groups,
// and a Gloo convenience.
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

#include <cstddef>
#include <exception>
#include <limits>
#include <utility>

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

// One collective per group, in order: MAX keeps found_inf 0 or 1 (PyTorch's ShardedGradScaler
// sums instead, which counts ranks; FSDP2/DTensor reduces with MAX), and gives the FP8 amaxes of
// every rank (TE's reduce_amax).
// Templated so LibTorch 2.x's c10d::Backend takes the same path as c10d::ProcessGroup.
template <typename Group>
void all_reduce_max_impl(at::Tensor& values, const std::vector<c10::intrusive_ptr<Group>>& groups,
                         const Reduced& what, bool nan_as_inf = false) {
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
  options.reduceOp = c10d::ReduceOp::MAX;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& group = groups[i];
    try {
      group->allreduce(tensors, options)->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "mixprec::distributed: all-reduce (MAX) of ", what.name,
                  " over process group ", i, " of ", groups.size(), " (", group->getBackendName(),
                  ", rank ", group->getRank(), " of ", group->getSize(), ") failed: ", e.what(),
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

}  // namespace

void all_reduce_max_(at::Tensor& found_inf, const std::vector<ProcessGroupPtr>& groups) {
  all_reduce_max_impl(found_inf, groups, kFoundInf);
}

GradScaler::FoundInfReducer found_inf_reducer(std::vector<ProcessGroupPtr> groups) {
  check_groups(groups);
  return [groups = std::move(groups)](at::Tensor& found_inf) {
    all_reduce_max_impl(found_inf, groups, kFoundInf);
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
    all_reduce_max_impl(amaxes, groups, kFp8Amax, /*nan_as_inf=*/true);
  };
}

std::function<void(at::Tensor&)> fp8_amax_reduction(ProcessGroupPtr group) {
  return fp8_amax_reduction(std::vector<ProcessGroupPtr>{std::move(group)});
}

#if MIXPREC_TORCH_2
GradScaler::FoundInfReducer found_inf_reducer_for_backends(
    std::vector<c10::intrusive_ptr<c10d::Backend>> backends) {
  check_groups(backends);
  return [backends = std::move(backends)](at::Tensor& found_inf) {
    all_reduce_max_impl(found_inf, backends, kFoundInf);
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
