// mixprec::distributed: one overflow decision across all ranks, on PyTorch's c10d process groups
// (Gloo, NCCL, or any c10d backend). Plugs into GradScaler::set_found_inf_reducer and
// set_grad_norm_reducer (the global norm of gradients sharded over ranks; clip_grad_norm_ without
// a scaler), and reduces FP8 delayed-scaling amaxes across ranks (fp8::Recipe::set_amax_reduction);
// needs a LibTorch built with USE_DISTRIBUTED and mixprec built with MIXPREC_WITH_DISTRIBUTED.
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

/// A GradScaler::GradNormReducer for parameters sharded over `group`'s ranks (FSDP/ZeRO style:
/// each rank holds the gradients of its own shard). GradScaler::clip_grad_norm_ hands it a
/// 2-element float64 tensor [this rank's power, this rank's found_inf]; it reduces both in ONE
/// in-place all-reduce and waits for it:
/// - norm_type 2 (and any finite p > 0): ReduceOp::SUM. Element 0 becomes the sum over the ranks
///   of sum |g|^p, whose p-th root is the norm of all shards together (FSDP1's clip_grad_norm_);
///   element 1 counts the ranks that saw inf/NaN, and any non-zero count skips the step.
/// - norm_type inf: ReduceOp::MAX, NaN first set to +inf (NCCL's and Gloo's MAX drop NaN, as for
///   fp8_amax_reduction): a rank whose grads held a NaN makes the norm +inf on every rank, and its
///   found_inf skips the step everywhere.
/// After it every rank takes the same norm and the same clip coefficient, and the reduced
/// found_inf stands for the found_inf reducer for that optimizer (every norm_type: for p other
/// than 2 and inf, unscale_'s found_inf goes into element 1), so every rank takes the same skip
/// decision with this one collective. Other optimizers stepped by the same scaler without
/// clip_grad_norm_ still need found_inf_reducer(group). Do not put
/// replicated parameters (DDP-averaged, the same on every rank) into an optimizer clipped through
/// it: their power would be counted once per rank. The tensor stays on its device (CPU: Gloo,
/// CUDA: NCCL, no host sync). Every rank must call clip_grad_norm_ for the same optimizers in the
/// same order. Throws c10::Error naming the group, its backend and this rank when the collective
/// fails or times out (the group's timeout bounds the wait, e.g. when another rank died), and for
/// a norm_type other than inf or a finite p > 0.
///
/// **Example**
/// ```cpp
/// mixprec::GradScaler scaler;
/// scaler.set_grad_norm_reducer(mixprec::distributed::grad_norm_reducer(world));
/// scaler.set_found_inf_reducer(mixprec::distributed::found_inf_reducer(world));  // other optimizers
/// scaler.scale(loss).backward();
/// at::Tensor norm = scaler.clip_grad_norm_(optimizer, /*max_norm=*/1.0);  // the global norm
/// scaler.step(optimizer);
/// scaler.update();
/// ```
GradScaler::GradNormReducer grad_norm_reducer(ProcessGroupPtr group);

/// mixprec::clip_grad_norm_ for parameters sharded over `group`'s ranks, without a GradScaler:
/// the norm of this rank's grads (norm_type 2 and inf: one read, sums in double; others as
/// mixprec::get_total_norm), ONE all-reduce (SUM of sum |g|^p; for inf, MAX with NaN sent as +inf
/// and a NaN flag beside it, so a NaN on any rank gives NaN on every rank, as a single process
/// would), the p-th root, then every local grad multiplied by clamp(max_norm / (norm + 1e-6),
/// max=1) as PyTorch computes it. Returns the global norm (0-dim float32, on the first grad's
/// device, else the first parameter's, else the CPU; no host sync unless error_if_nonfinite),
/// the same on every rank. A rank without grads takes part with a zero. norm_type must be inf or
/// a finite p > 0 (others throw). error_if_nonfinite: reads the norm (a sync) and, when it is not
/// finite, throws PyTorch's RuntimeError text on every rank ("The total norm of order 2.0 for
/// gradients from `parameters` is non-finite, ..."), before any grad is changed. Every rank must
/// call it in the same order as its other collectives on `group`. Collective failures throw as
/// grad_norm_reducer's.
///
/// **Example**
/// ```cpp
/// loss.backward();  // each rank: the grads of its own shard
/// at::Tensor norm = mixprec::distributed::clip_grad_norm_(shard_params, /*max_norm=*/1.0, world);
/// optimizer.step();
/// ```
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                           ProcessGroupPtr group, double norm_type = 2.0,
                           bool error_if_nonfinite = false);

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
