// The C ABI of GradScaler (include/mixprec/c_api.h): thin wrappers over mixprec::GradScaler, each
// running in guarded() (src/c/guard.h) so that no C++ exception reaches the C caller.
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "c/guard.h"
#include "c/handles.h"
#include "c/options.h"
#include "c/streams.h"
#include "mixprec/c_api.h"
#include "mixprec/checkpoint.h"
#include "mixprec/clip.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"
#include "torch/checkpoint/saving.h"
#include "torch/checkpoint/unpickle.h"

static_assert(MIXPREC_C_ABI == MIXPREC_C_ABI_VERSION,
              "CMakeLists.txt's MIXPREC_C_ABI_VERSION (the SONAME) differs from c_api.h's");

struct mixprec_grad_scaler {
  explicit mixprec_grad_scaler(mixprec::GradScaler s) : scaler(std::move(s)) {}
  mixprec::GradScaler scaler;
  // The bytes of a state_dict size query (buffer NULL), for the copy call that follows it: the
  // state serialized once. Dropped by every call that may change the scaler (scaler_arg).
  std::vector<char> state_bytes;
  bool state_kept = false;
};

namespace mixprec::c_api {

std::vector<at::Tensor> tensor_list_arg(void* const* handles, std::size_t n, const char* call,
                                        const char* name, bool allow_null_entries) {
  if (n > 0) require(handles, call, name);
  std::vector<at::Tensor> tensors;
  tensors.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (handles[i] == nullptr && !allow_null_entries) {
      throw Failure{MIXPREC_ERROR_NULL_ARGUMENT,
                    std::string(call) + ": " + name + "[" + std::to_string(i) + "] is NULL"};
    }
    tensors.push_back(handles[i] == nullptr ? at::Tensor() : *static_cast<at::Tensor*>(handles[i]));
  }
  return tensors;
}

namespace {

// The scaler of a handle, for a call that may change it: the kept state bytes are dropped.
GradScaler& scaler_arg(mixprec_grad_scaler* s, const char* call) {
  mixprec_grad_scaler* handle = require(s, call, "scaler");
  if (handle->state_kept) {
    handle->state_kept = false;
    std::vector<char>().swap(handle->state_bytes);
  }
  return handle->scaler;
}

int step_with(mixprec_grad_scaler* s, torch::optim::Optimizer& (*get)(void*, const char*),
              void* optimizer, int* out_stepped, const char* call) {
  return guarded([&] {
    GradScaler& scaler = scaler_arg(s, call);
    torch::optim::Optimizer& opt = get(optimizer, call);
    scaler.step(opt);
    if (out_stepped == nullptr) return;
    // The step ran: failing to read whether it was applied (a device error at the sync) is
    // reported as -1 and this thread's last error, not as a failed step.
    try {
      *out_stepped = scaler.last_step_applied(opt) ? 1 : 0;
    } catch (...) {
      *out_stepped = -1;
      guarded([] { throw; });  // records the exception in flight
    }
  });
}

int unscale_with(mixprec_grad_scaler* s, torch::optim::Optimizer& (*get)(void*, const char*),
                 void* optimizer, const char* call) {
  return guarded([&] { scaler_arg(s, call).unscale_(get(optimizer, call)); });
}

int last_step_applied_with(mixprec_grad_scaler* s,
                           torch::optim::Optimizer& (*get)(void*, const char*), void* optimizer,
                           int* out, const char* call) {
  return guarded([&] {
    GradScaler& scaler = scaler_arg(s, call);
    torch::optim::Optimizer& opt = get(optimizer, call);
    out_arg(out, call) = scaler.last_step_applied(opt) ? 1 : 0;
  });
}

int last_step_found_inf_with(mixprec_grad_scaler* s,
                             torch::optim::Optimizer& (*get)(void*, const char*), void* optimizer,
                             void** out_tensor, const char* call) {
  return guarded([&] {
    GradScaler& scaler = scaler_arg(s, call);
    torch::optim::Optimizer& opt = get(optimizer, call);
    void*& out = out_arg(out_tensor, call, "out_tensor");
    out = new_tensor_handle(scaler.last_step_found_inf(opt));
  });
}

int clip_with(mixprec_grad_scaler* s, torch::optim::Optimizer& (*get)(void*, const char*),
              void* optimizer, double max_norm, double norm_type, void** out_norm_tensor,
              const char* call) {
  return guarded([&] {
    GradScaler& scaler = scaler_arg(s, call);
    torch::optim::Optimizer& opt = get(optimizer, call);
    void*& out = out_arg(out_norm_tensor, call, "out_norm_tensor");
    out = new_tensor_handle(scaler.clip_grad_norm_(opt, max_norm, norm_type));
  });
}

// Loads a scaler from a checked source (mixprec's reader of untrusted bytes: unpickle.h).
void load_scaler(GradScaler& scaler, std::unique_ptr<mixprec::detail::ByteSource> source,
                 const char* call) {
  const c10::IValue value = mixprec::detail::load_torch_save(std::move(source));
  if (!value.isGenericDict()) {
    throw Failure{MIXPREC_ERROR_RUNTIME, std::string(call) + ": the bytes hold a " +
                                                             value.tagKind() + ", not a state dict"};
  }
  scaler.load_state_dict(value.toGenericDict());
}

}  // namespace
}  // namespace mixprec::c_api

using mixprec::c_api::guarded;
using mixprec::c_api::optimizer_arg;
using mixprec::c_api::out_arg;
using mixprec::c_api::require;
using mixprec::c_api::scaler_arg;
using mixprec::c_api::shared_optimizer_arg;

extern "C" {

// ---- library ------------------------------------------------------------------------------------

const char* mixprec_version(void) { return MIXPREC_VERSION_STRING; }

int mixprec_abi_version(void) { return MIXPREC_C_ABI; }

void mixprec_tensor_free(void* tensor) { delete static_cast<at::Tensor*>(tensor); }

// ---- the scaler ---------------------------------------------------------------------------------

int mixprec_grad_scaler_create(const mixprec_grad_scaler_options* options,
                               mixprec_grad_scaler** out) {
  return guarded([&] {
    mixprec_grad_scaler*& result = out_arg(out, "mixprec_grad_scaler_create");
    mixprec_grad_scaler_options defaults;
    mixprec_grad_scaler_options_default(&defaults);
    result = new mixprec_grad_scaler(
        mixprec::GradScaler(mixprec::c_api::to_options(options ? *options : defaults)));
  });
}

void mixprec_grad_scaler_destroy(mixprec_grad_scaler* scaler) { delete scaler; }

int mixprec_grad_scaler_scale(mixprec_grad_scaler* s, void* tensor, void** out_tensor) {
  const char* call = "mixprec_grad_scaler_scale";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    const at::Tensor& t = mixprec::c_api::tensor_arg(tensor, call, "tensor");
    void*& out = out_arg(out_tensor, call, "out_tensor");
    at::Tensor scaled = scaler.scale(t);
    out = new at::Tensor(std::move(scaled));
  });
}

int mixprec_grad_scaler_unscale_(mixprec_grad_scaler* s, void* optimizer) {
  return mixprec::c_api::unscale_with(s, &optimizer_arg, optimizer, "mixprec_grad_scaler_unscale_");
}

int mixprec_grad_scaler_unscale_shared_(mixprec_grad_scaler* s, void* shared_optimizer) {
  return mixprec::c_api::unscale_with(s, &shared_optimizer_arg, shared_optimizer,
                                      "mixprec_grad_scaler_unscale_shared_");
}

int mixprec_grad_scaler_step(mixprec_grad_scaler* s, void* optimizer, int* out_stepped) {
  return mixprec::c_api::step_with(s, &optimizer_arg, optimizer, out_stepped,
                                   "mixprec_grad_scaler_step");
}

int mixprec_grad_scaler_step_shared(mixprec_grad_scaler* s, void* shared_optimizer,
                                    int* out_stepped) {
  return mixprec::c_api::step_with(s, &shared_optimizer_arg, shared_optimizer, out_stepped,
                                   "mixprec_grad_scaler_step_shared");
}

int mixprec_grad_scaler_update(mixprec_grad_scaler* s) {
  return guarded([&] { scaler_arg(s, "mixprec_grad_scaler_update").update(); });
}

int mixprec_grad_scaler_update_to(mixprec_grad_scaler* s, double new_scale) {
  return guarded([&] { scaler_arg(s, "mixprec_grad_scaler_update_to").update(new_scale); });
}

int mixprec_grad_scaler_update_to_tensor(mixprec_grad_scaler* s, void* new_scale) {
  const char* call = "mixprec_grad_scaler_update_to_tensor";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    scaler.update(mixprec::c_api::tensor_arg(new_scale, call, "new_scale"));
  });
}

int mixprec_grad_scaler_get_scale(mixprec_grad_scaler* s, double* out) {
  const char* call = "mixprec_grad_scaler_get_scale";
  return guarded([&] {
    const double v = scaler_arg(s, call).get_scale();
    out_arg(out, call) = v;
  });
}

int mixprec_grad_scaler_get_scale_async(mixprec_grad_scaler* s, void** out_tensor) {
  const char* call = "mixprec_grad_scaler_get_scale_async";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    void*& out = out_arg(out_tensor, call, "out_tensor");
    out = mixprec::c_api::new_tensor_handle(scaler.get_scale_async());
  });
}

int mixprec_grad_scaler_get_growth_tracker(mixprec_grad_scaler* s, int64_t* out) {
  const char* call = "mixprec_grad_scaler_get_growth_tracker";
  return guarded([&] {
    const int64_t v = scaler_arg(s, call).get_growth_tracker();
    out_arg(out, call) = v;
  });
}

int mixprec_grad_scaler_is_enabled(mixprec_grad_scaler* s, int* out) {
  const char* call = "mixprec_grad_scaler_is_enabled";
  return guarded([&] {
    const bool v = scaler_arg(s, call).is_enabled();
    out_arg(out, call) = v ? 1 : 0;
  });
}

int mixprec_grad_scaler_get_growth_factor(mixprec_grad_scaler* s, double* out) {
  const char* call = "mixprec_grad_scaler_get_growth_factor";
  return guarded([&] {
    const double v = scaler_arg(s, call).get_growth_factor();
    out_arg(out, call) = v;
  });
}

int mixprec_grad_scaler_set_growth_factor(mixprec_grad_scaler* s, double v) {
  return guarded([&] { scaler_arg(s, "mixprec_grad_scaler_set_growth_factor").set_growth_factor(v); });
}

int mixprec_grad_scaler_get_backoff_factor(mixprec_grad_scaler* s, double* out) {
  const char* call = "mixprec_grad_scaler_get_backoff_factor";
  return guarded([&] {
    const double v = scaler_arg(s, call).get_backoff_factor();
    out_arg(out, call) = v;
  });
}

int mixprec_grad_scaler_set_backoff_factor(mixprec_grad_scaler* s, double v) {
  return guarded(
      [&] { scaler_arg(s, "mixprec_grad_scaler_set_backoff_factor").set_backoff_factor(v); });
}

int mixprec_grad_scaler_get_growth_interval(mixprec_grad_scaler* s, int64_t* out) {
  const char* call = "mixprec_grad_scaler_get_growth_interval";
  return guarded([&] {
    const int64_t v = scaler_arg(s, call).get_growth_interval();
    out_arg(out, call) = v;
  });
}

int mixprec_grad_scaler_set_growth_interval(mixprec_grad_scaler* s, int64_t v) {
  return guarded(
      [&] { scaler_arg(s, "mixprec_grad_scaler_set_growth_interval").set_growth_interval(v); });
}

// ---- the step's outcome and telemetry -----------------------------------------------------------

int mixprec_grad_scaler_last_step_applied(mixprec_grad_scaler* s, void* optimizer, int* out) {
  return mixprec::c_api::last_step_applied_with(s, &optimizer_arg, optimizer, out,
                                                "mixprec_grad_scaler_last_step_applied");
}

int mixprec_grad_scaler_last_step_applied_shared(mixprec_grad_scaler* s, void* shared_optimizer,
                                                 int* out) {
  return mixprec::c_api::last_step_applied_with(s, &shared_optimizer_arg, shared_optimizer, out,
                                                "mixprec_grad_scaler_last_step_applied_shared");
}

int mixprec_grad_scaler_last_step_found_inf(mixprec_grad_scaler* s, void* optimizer,
                                            void** out_tensor) {
  return mixprec::c_api::last_step_found_inf_with(s, &optimizer_arg, optimizer, out_tensor,
                                                  "mixprec_grad_scaler_last_step_found_inf");
}

int mixprec_grad_scaler_last_step_found_inf_shared(mixprec_grad_scaler* s, void* shared_optimizer,
                                                   void** out_tensor) {
  return mixprec::c_api::last_step_found_inf_with(
      s, &shared_optimizer_arg, shared_optimizer, out_tensor,
      "mixprec_grad_scaler_last_step_found_inf_shared");
}

int mixprec_grad_scaler_get_telemetry(mixprec_grad_scaler* s, mixprec_grad_scaler_telemetry* out) {
  const char* call = "mixprec_grad_scaler_get_telemetry";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    mixprec_grad_scaler_telemetry& result = out_arg(out, call);
    // A known version's size (fields are only appended): exactly its fields are written. Every
    // field is version 1's so far.
    if (result.struct_size != mixprec::c_api::kTelemetryV1Size &&
        result.struct_size != sizeof(mixprec_grad_scaler_telemetry)) {
      mixprec::c_api::invalid(std::string(call) + ": out->struct_size is " +
                              std::to_string(result.struct_size) + ", this library's " +
                              "mixprec_grad_scaler_telemetry has " +
                              std::to_string(sizeof(mixprec_grad_scaler_telemetry)) +
                              " bytes: set it to sizeof(mixprec_grad_scaler_telemetry)");
    }
    const mixprec::ScalerTelemetry t = scaler.telemetry();
    result.iterations = t.iterations;
    result.skipped_steps = t.skipped_steps;
    result.growths = t.growths;
    result.backoffs = t.backoffs;
    result.consecutive_overflows = t.consecutive_overflows;
    result.last_overflow_iteration = t.last_overflow_iteration;
    result.hysteresis_tracker = t.hysteresis_tracker;
  });
}

// ---- the gradient-list path ---------------------------------------------------------------------

int mixprec_grad_scaler_unscale_grads_(mixprec_grad_scaler* s, void* const* grads, size_t n,
                                       void** out_found_inf) {
  const char* call = "mixprec_grad_scaler_unscale_grads_";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    std::vector<at::Tensor> list =
        mixprec::c_api::tensor_list_arg(grads, n, call, "grads", /*allow_null_entries=*/true);
    void*& out = out_arg(out_found_inf, call, "out_found_inf");
    out = new at::Tensor(scaler.unscale_grads_(list));
  });
}

// ---- gradient clipping --------------------------------------------------------------------------

int mixprec_grad_scaler_clip_grad_norm(mixprec_grad_scaler* s, void* optimizer, double max_norm,
                                       double norm_type, void** out_norm_tensor) {
  return mixprec::c_api::clip_with(s, &optimizer_arg, optimizer, max_norm, norm_type,
                                   out_norm_tensor, "mixprec_grad_scaler_clip_grad_norm");
}

int mixprec_grad_scaler_clip_grad_norm_shared(mixprec_grad_scaler* s, void* shared_optimizer,
                                              double max_norm, double norm_type,
                                              void** out_norm_tensor) {
  return mixprec::c_api::clip_with(s, &shared_optimizer_arg, shared_optimizer, max_norm,
                                   norm_type, out_norm_tensor,
                                   "mixprec_grad_scaler_clip_grad_norm_shared");
}

int mixprec_clip_grad_norm(void* const* params, size_t n, double max_norm, double norm_type,
                           int error_if_nonfinite, void** out_norm_tensor) {
  const char* call = "mixprec_clip_grad_norm";
  return guarded([&] {
    const std::vector<at::Tensor> list = mixprec::c_api::tensor_list_arg(params, n, call, "params", /*allow_null_entries=*/false);
    void*& out = out_arg(out_norm_tensor, call, "out_norm_tensor");
    out = new at::Tensor(
        mixprec::clip_grad_norm_(list, max_norm, norm_type, error_if_nonfinite != 0));
  });
}

// ---- state --------------------------------------------------------------------------------------

int mixprec_grad_scaler_state_dict(mixprec_grad_scaler* s, void* buffer, size_t capacity,
                                   size_t* out_size) {
  const char* call = "mixprec_grad_scaler_state_dict";
  return guarded([&] {
    mixprec_grad_scaler* handle = require(s, call, "scaler");  // reading: keeps what is kept
    size_t& size = out_arg(out_size, call, "out_size");
    if (!handle->state_kept) {
      handle->state_bytes = mixprec::pickle_save_untagged(handle->scaler.state_dict());
      handle->state_kept = true;
    }
    const std::vector<char>& bytes = handle->state_bytes;
    size = bytes.size();
    if (buffer == nullptr) return;  // the size query: the bytes wait for the copy
    if (capacity < bytes.size()) {
      throw mixprec::c_api::Failure{
          MIXPREC_ERROR_BUFFER_TOO_SMALL,
          std::string(call) + ": the state takes " + std::to_string(bytes.size()) +
              " bytes, the buffer has " + std::to_string(capacity) +
              " (call with buffer NULL for the size)"};
    }
    std::memcpy(buffer, bytes.data(), bytes.size());
    handle->state_kept = false;
    std::vector<char>().swap(handle->state_bytes);
  });
}

int mixprec_grad_scaler_load_state_dict(mixprec_grad_scaler* s, const void* data, size_t size) {
  const char* call = "mixprec_grad_scaler_load_state_dict";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    // Read in place, not copied.
    mixprec::c_api::load_scaler(scaler, mixprec::detail::memory_source(require(data, call, "data"), size), call);
  });
}

int mixprec_grad_scaler_save(mixprec_grad_scaler* s, const char* path) {
  const char* call = "mixprec_grad_scaler_save";
  return guarded([&] {
    const mixprec_grad_scaler* handle = require(s, call, "scaler");
    mixprec::detail::save_untagged(require(path, call, "path"), handle->scaler.state_dict(), call);
  });
}

int mixprec_grad_scaler_load(mixprec_grad_scaler* s, const char* path) {
  const char* call = "mixprec_grad_scaler_load";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    mixprec::c_api::load_scaler(scaler, mixprec::detail::file_source(require(path, call, "path")), call);
  });
}

int mixprec_grad_scaler_save_to(mixprec_grad_scaler* s, mixprec_write_fn write, void* context) {
  const char* call = "mixprec_grad_scaler_save_to";
  return guarded([&] {
    const mixprec_grad_scaler* handle = require(s, call, "scaler");
    mixprec::detail::write_untagged(handle->scaler.state_dict(),
                                    mixprec::c_api::callback_sink(write, context, call));
  });
}

int mixprec_grad_scaler_load_from(mixprec_grad_scaler* s, mixprec_read_fn read, void* context,
                                  uint64_t size) {
  const char* call = "mixprec_grad_scaler_load_from";
  return guarded([&] {
    mixprec::GradScaler& scaler = scaler_arg(s, call);
    mixprec::c_api::load_scaler(scaler, mixprec::c_api::callback_source(read, context, size, call), call);
  });
}

}  // extern "C"
