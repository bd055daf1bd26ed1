// mixprec::distributed: one overflow decision across all ranks, on PyTorch's c10d process groups
// (Gloo, NCCL, or any c10d backend). Plugs into GradScaler::set_found_inf_reducer, and reduces
// FP8 delayed-scaling amaxes across ranks (fp8::Recipe::set_amax_reduction); needs a
// LibTorch built with USE_DISTRIBUTED and mixprec built with MIXPREC_WITH_DISTRIBUTED.
#pragma once

// Set on mixprec::mixprec when its distributed code was built; without it a program would compile
// and then fail to link. find_package(mixprec) says which was built: mixprec_WITH_DISTRIBUTED,
// or find_package(mixprec REQUIRED COMPONENTS distributed).
#ifndef MIXPREC_HAS_DISTRIBUTED
#error "mixprec/distributed.h: this mixprec was built without its distributed code \
(MIXPREC_WITH_DISTRIBUTED was OFF: a LibTorch without c10d, or turned off). Rebuild mixprec \
with -DMIXPREC_WITH_DISTRIBUTED=ON against a LibTorch with c10d (docs/distributed.md)."
#endif

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/grad_scaler.h"
#include "mixprec/torch_version.h"

namespace mixprec {
namespace distributed {

/// A c10d process group (LibTorch 1.13: the backend itself, e.g. ProcessGroupGloo; LibTorch 2.x:
/// the c10d::ProcessGroup that dispatches to its per-device backends).
using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

/// A GradScaler::FoundInfReducer that all-reduces found_inf with ReduceOp::MAX over each group in
/// turn (e.g. data-, tensor- and pipeline-parallel groups), in place, waiting for each collective.
/// After it, every rank of the union of the groups holds 1 if any of them saw inf/NaN, so all skip
/// or step together and keep identical scales.
///
/// The tensor stays on its device: a CPU found_inf goes to Gloo as it is, a CUDA one to NCCL
/// (whose wait() orders the current stream after the collective, without a host sync). Every rank
/// must call unscale_/step for the same optimizers in the same order. Throws c10::Error naming the
/// group, its backend and this rank when a collective fails or times out (the group's timeout
/// bounds the wait, e.g. when another rank died).
///
/// **Example**
/// ```cpp
/// auto world = mixprec::distributed::make_gloo_process_group(store, rank, world_size);
/// mixprec::GradScaler scaler;
/// scaler.set_found_inf_reducer(mixprec::distributed::found_inf_reducer({data_group, pipe_group}));
/// ```
GradScaler::FoundInfReducer found_inf_reducer(std::vector<ProcessGroupPtr> groups);
/// The reducer over one process group (usually the world).
GradScaler::FoundInfReducer found_inf_reducer(ProcessGroupPtr group);

/// What the reducer does, for composing a custom callback: all-reduces `found_inf` (any dtype and
/// device the backends support) with MAX over each group in turn, in place, and waits.
void all_reduce_max_(at::Tensor& found_inf, const std::vector<ProcessGroupPtr>& groups);

/// A cross-rank reduction of FP8 amaxes for fp8::Recipe::set_amax_reduction (delayed scaling):
/// it gets one floating-point tensor (float32 from the recipe) holding every amax cast since the
/// last update, and all-reduces it in place with ReduceOp::MAX over each group in turn, in ONE
/// collective per group, waiting for each. After it every rank of the union of the groups holds
/// the elementwise max, so all ranks compute the same scales and keep identical histories (TE's
/// reduce_amax; transformer_engine/pytorch/fp8.py, reduce_tensor_across_group_op_max).
///
/// NaN amaxes are first set to +inf, as MS-AMP does (msamp/common/tensor/meta.py): NCCL's MAX
/// ignores NaN (Gloo's too), so a NaN on one rank would vanish and every rank would take its
/// scales from the other ranks' amaxes. As +inf it reaches every rank, and the delayed rule keeps
/// the old scale for an infinite amax exactly as for a NaN one. The fill is a tensor op (no host
/// sync for CUDA tensors; NCCL's wait() orders the current stream after the collective). An empty
/// tensor is left alone, with no collective. Every rank must cast the same tensors in the same
/// order in every iteration: the collectives pair up by order and the amaxes by position. Throws
/// c10::Error naming the group, its backend and this rank when a collective fails or times out.
///
/// **Example**
/// ```cpp
/// mixprec::fp8::Recipe recipe;  // delayed scaling
/// recipe.set_amax_reduction(mixprec::distributed::fp8_amax_reduction(world));
/// ```
std::function<void(at::Tensor&)> fp8_amax_reduction(std::vector<ProcessGroupPtr> groups);
/// The FP8 amax reduction over one process group (usually the world, or the data-parallel group).
std::function<void(at::Tensor&)> fp8_amax_reduction(ProcessGroupPtr group);

#if MIXPREC_TORCH_2
/// LibTorch 2.x only: a c10d::Backend (e.g. a ProcessGroupNCCL made directly) used without a
/// c10d::ProcessGroup around it. Same behaviour as found_inf_reducer.
GradScaler::FoundInfReducer found_inf_reducer_for_backends(
    std::vector<c10::intrusive_ptr<c10d::Backend>> backends);
#endif

/// The default timeout of make_gloo_process_group: long enough for a slow first step, short
/// enough that a dead rank is reported instead of hanging for PyTorch's 30 minutes.
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

/// A Gloo process group of `world_size` ranks meeting through `store` (a c10d::FileStore or
/// TCPStore), with `timeout` bounding the rendezvous and every collective (the store's own
/// timeout is set to it too). Gloo binds to `hostname` ("127.0.0.1" for one machine; the name or
/// address of this machine's interface across machines; "" lets Gloo pick one from the machine's
/// hostname, as torch.distributed does). Throws if LibTorch was built without Gloo.
///
/// **Example**
/// ```cpp
/// auto store = c10::make_intrusive<c10d::FileStore>("/tmp/job42/store", world_size);
/// auto group = mixprec::distributed::make_gloo_process_group(store, rank, world_size,
///                                                            std::chrono::seconds(30));
/// ```
ProcessGroupPtr make_gloo_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int world_size,
                                        std::chrono::milliseconds timeout = kDefaultTimeout,
                                        const std::string& hostname = "127.0.0.1");

}  // namespace distributed
}  // namespace mixprec
