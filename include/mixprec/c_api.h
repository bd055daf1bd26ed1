/* mixprec's C ABI: GradScaler and the fused optimizers for the LibTorch bindings (TorchSharp,
 * tch-rs, mlverse/torch, ...), which pass tensors and optimizers across their own C layers.
 * Valid C99 and C++. Library: libmixprec_c.so (CMake target mixprec::c), which exports only
 * mixprec_* symbols. docs/bindings.md shows calls from C#, Rust and C.
 *
 * Handles
 *   - Tensors are the bindings' `torch::Tensor*` (tch-rs `tensor`, TorchSharp `Tensor`), passed
 *     as void*. They must come from the same LibTorch build as this library's.
 *   - Optimizers come in both conventions: `torch::optim::Optimizer*` (tch-rs `optimizer`), and
 *     `std::shared_ptr<torch::optim::Optimizer>*` (TorchSharp `Optimizer`) for the `_shared`
 *     calls. TorchSharp's own SGD/Adam/AdamW are managed code without a native optimizer, and
 *     tch-rs keeps its pointer private: their users take the gradient-list path, or create
 *     mixprec's fused optimizers here.
 *   - The scaler is an opaque mixprec_grad_scaler*, made by mixprec_grad_scaler_create and
 *     released by mixprec_grad_scaler_destroy.
 *
 * Ownership
 *   - Every tensor this API returns (out_tensor, out_found_inf, ...) is a new heap
 *     `torch::Tensor`, owned by the caller. Free it with the binding's own call (tch-rs
 *     `at_free`, TorchSharp `THSTensor_dispose`: both `delete` the pointer) or with
 *     mixprec_tensor_free.
 *   - Every optimizer created here is owned by the caller: free a plain one with
 *     mixprec_optimizer_free (or tch-rs `ato_free`), a shared one with
 *     mixprec_optimizer_free_shared (or TorchSharp's `THSNN_Optimizer_dispose`).
 *   - A byte buffer this API allocates (out_bytes) is the caller's: free it with
 *     mixprec_bytes_free.
 *   - The API never frees, keeps or replaces what it was given. The scaler holds no reference to
 *     an optimizer after a call returns; it tells optimizers apart by their address.
 *
 * Errors
 *   - Every int-returning call returns MIXPREC_OK (0) on success and a non-zero mixprec_status
 *     on failure. mixprec_last_error() then says why, in UTF-8, with PyTorch's message for
 *     misuse (the same text as the C++ API). A NULL handle is an error
 *     (MIXPREC_ERROR_NULL_ARGUMENT), never a crash.
 *   - No C++ exception crosses this boundary.
 *   - A failed call leaves its out-parameters untouched (but for the size that
 *     mixprec_grad_scaler_state_dict reports with MIXPREC_ERROR_BUFFER_TOO_SMALL).
 *
 * Versions: the structs start with struct_size and only ever gain fields at their end. A
 * library accepts the size of every version it knows and writes exactly the caller's.
 *
 * Threads: a scaler is not thread-safe (one per training loop). The last error is per thread.
 */
#ifndef MIXPREC_C_API_H_
#define MIXPREC_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(MIXPREC_C_BUILDING)
#define MIXPREC_C_EXPORT __declspec(dllexport)
#elif defined(_WIN32)
#define MIXPREC_C_EXPORT __declspec(dllimport)
#elif defined(__GNUC__)
#define MIXPREC_C_EXPORT __attribute__((visibility("default")))
#else
#define MIXPREC_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI version of this header: the library's SONAME is libmixprec_c.so.<this>. It changes
 *  only when a call is removed or changes its signature or meaning, or a struct loses or
 *  reorders a field (docs/bindings.md). */
#define MIXPREC_C_ABI_VERSION 1

/** What every int-returning call returns. */
typedef enum mixprec_status {
  MIXPREC_OK = 0,
  MIXPREC_ERROR_NULL_ARGUMENT = 1,     /**< a required pointer or handle was NULL */
  MIXPREC_ERROR_INVALID_ARGUMENT = 2,  /**< a bad struct_size, count or enum value */
  MIXPREC_ERROR_RUNTIME = 3,           /**< misuse or failure reported by mixprec or LibTorch */
  MIXPREC_ERROR_BUFFER_TOO_SMALL = 4,  /**< the caller's buffer cannot hold the result */
  MIXPREC_ERROR_OUT_OF_MEMORY = 5,     /**< an allocation failed */
  MIXPREC_ERROR_UNKNOWN = 6            /**< any other C++ exception */
} mixprec_status;

/** GradScalerOptions::hysteresis_refill. */
typedef enum mixprec_hysteresis_refill {
  MIXPREC_HYSTERESIS_REFILL_ON_GROWTH = 0,     /**< Megatron-LM (the default) */
  MIXPREC_HYSTERESIS_REFILL_ON_CLEAN_STEP = 1  /**< DeepSpeed's consecutive_hysteresis */
} mixprec_hysteresis_refill;

/** GradScalerOptions::at_min_scale (the C++ kCallback is not offered here). */
typedef enum mixprec_at_min_scale {
  MIXPREC_AT_MIN_SCALE_CLAMP = 0,  /**< keep the scale at min_scale and go on (the default) */
  MIXPREC_AT_MIN_SCALE_ERROR = 1   /**< update() fails with MIXPREC_ERROR_RUNTIME */
} mixprec_at_min_scale;

typedef struct mixprec_grad_scaler mixprec_grad_scaler; /* opaque */

/** The scaler's options. Declare one, fill it with mixprec_grad_scaler_options_default, then set
 *  fields (directly or with the setters). Fields are only ever appended in later versions. */
typedef struct mixprec_grad_scaler_options {
  size_t struct_size;       /**< the caller's version's size, set by _default or _init */
  double init_scale;        /**< 65536.0 */
  double growth_factor;     /**< 2.0 */
  double backoff_factor;    /**< 0.5 */
  int64_t growth_interval;  /**< 2000 */
  int enabled;              /**< 1 */
  /* Beyond PyTorch (docs/options.md); each default keeps PyTorch's behaviour. */
  int32_t hysteresis;       /**< overflows tolerated before a backoff: 1 */
  int32_t hysteresis_refill; /**< a mixprec_hysteresis_refill: ON_GROWTH */
  double min_scale;         /**< backoff floor when > 0: 0 (none) */
  double max_scale;         /**< growth ceiling: FLT_MAX */
  int32_t at_min_scale;     /**< a mixprec_at_min_scale: CLAMP */
  int64_t history_size;     /**< rows of (iteration, scale, overflow) kept: 0 */
} mixprec_grad_scaler_options;

/** What update() has counted (GradScaler::telemetry()). Set struct_size to
 *  sizeof(mixprec_grad_scaler_telemetry) before the call (a later library writes exactly the
 *  fields of that version). */
typedef struct mixprec_grad_scaler_telemetry {
  size_t struct_size;
  int64_t iterations;               /**< update() calls that applied the rule */
  int64_t skipped_steps;            /**< of those, iterations that overflowed */
  int64_t growths;                  /**< times the scale grew */
  int64_t backoffs;                 /**< times the scale backed off */
  int64_t consecutive_overflows;    /**< overflows since the last clean iteration */
  int64_t last_overflow_iteration;  /**< 0-based iteration of the last overflow, or -1 */
  int64_t hysteresis_tracker;       /**< overflows still tolerated before a backoff */
} mixprec_grad_scaler_telemetry;

/* ---- library ------------------------------------------------------------------------------- */

/** The last error of this thread: valid until this thread's next failing call; "" if none. */
MIXPREC_C_EXPORT const char* mixprec_last_error(void);
/** mixprec's version, e.g. "0.1.0". */
MIXPREC_C_EXPORT const char* mixprec_version(void);
/** The library's MIXPREC_C_ABI_VERSION: compare with the header's at load time. */
MIXPREC_C_EXPORT int mixprec_abi_version(void);
/** Deletes a torch::Tensor* this API returned (as tch-rs at_free). NULL is a no-op. */
MIXPREC_C_EXPORT void mixprec_tensor_free(void* tensor);

/* ---- options ------------------------------------------------------------------------------- */

/** PyTorch's defaults (and mixprec's neutral extensions); sets struct_size. NULL is a no-op.
 *  The exported function writes exactly the version-1 struct (the fields up to history_size),
 *  in every later library too, so an older caller's struct is never overrun. In C and C++ the
 *  macro below replaces the call by mixprec_grad_scaler_options_init(out, sizeof the struct of
 *  the header the caller was built with), so fields appended later reach _create; bindings that
 *  call the symbol get version 1, or call _init with their own size. */
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_default(mixprec_grad_scaler_options* out);
#ifndef MIXPREC_NO_OPTIONS_DEFAULT_MACRO
#define mixprec_grad_scaler_options_default(out) \
  ((void)mixprec_grad_scaler_options_init((out), sizeof(mixprec_grad_scaler_options)))
#endif
/** The defaults, writing exactly `struct_size` bytes: the caller's size of the struct, which a
 *  later library (with fields appended) still honours. Fails (MIXPREC_ERROR_INVALID_ARGUMENT)
 *  for a size that no version of the struct has, NULL_ARGUMENT for out NULL. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_options_init(mixprec_grad_scaler_options* out,
                                                      size_t struct_size);
/* The setters write one field; NULL is a no-op. Values are checked by _create. */
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_set_init_scale(mixprec_grad_scaler_options* o,
                                                                 double v);
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_set_growth_factor(
    mixprec_grad_scaler_options* o, double v);
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_set_backoff_factor(
    mixprec_grad_scaler_options* o, double v);
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_set_growth_interval(
    mixprec_grad_scaler_options* o, int64_t v);
MIXPREC_C_EXPORT void mixprec_grad_scaler_options_set_enabled(mixprec_grad_scaler_options* o,
                                                              int enabled);

/* ---- the scaler ---------------------------------------------------------------------------- */

/** A scaler with `options` (NULL: all defaults; fields past options->struct_size keep theirs).
 *  Fails, with the C++ constructor's message, for invalid values; with
 *  MIXPREC_ERROR_INVALID_ARGUMENT for a struct_size of no version this library knows (an
 *  options struct not filled by mixprec_grad_scaler_options_default). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_create(const mixprec_grad_scaler_options* options,
                                                mixprec_grad_scaler** out);
/** Releases the scaler and its device tensors. NULL is a no-op. */
MIXPREC_C_EXPORT void mixprec_grad_scaler_destroy(mixprec_grad_scaler* scaler);

/** *out_tensor = tensor * scale (autograd-tracked): a new heap torch::Tensor. The first call
 *  creates the scale on the tensor's device. Disabled: a new handle to `tensor` itself. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_scale(mixprec_grad_scaler* s, void* tensor,
                                               void** out_tensor);
/** Divides the optimizer's gradients in place by the scale and records whether any held
 *  inf/NaN (GradScaler::unscale_). `optimizer`: torch::optim::Optimizer*. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_unscale_(mixprec_grad_scaler* s, void* optimizer);
/** As mixprec_grad_scaler_unscale_, for std::shared_ptr<torch::optim::Optimizer>*. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_unscale_shared_(mixprec_grad_scaler* s,
                                                         void* shared_optimizer);
/** Unscales (unless unscale_ ran) and steps the optimizer unless a gradient held inf/NaN.
 *  *out_stepped (may be NULL): 1 if the step ran, 0 if it was skipped. For mixprec's fused
 *  optimizers the step always runs its kernels, which skip by themselves on the device:
 *  *out_stepped then reads found_inf (a device sync on CUDA; pass NULL to avoid it). If that
 *  read fails after the step ran (a device error), the call still returns MIXPREC_OK, with
 *  *out_stepped -1 and mixprec_last_error() saying why. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_step(mixprec_grad_scaler* s, void* optimizer,
                                              int* out_stepped);
/** As mixprec_grad_scaler_step, for std::shared_ptr<torch::optim::Optimizer>*. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_step_shared(mixprec_grad_scaler* s,
                                                     void* shared_optimizer, int* out_stepped);
/** Backs the scale off after an overflow, else counts a clean step and grows the scale every
 *  growth_interval clean steps (GradScaler::update()). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_update(mixprec_grad_scaler* s);
/** Sets the scale to new_scale (GradScaler::update(double)). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_update_to(mixprec_grad_scaler* s, double new_scale);
/** Sets the scale to a 1-element float32 tensor's value, without a host sync
 *  (GradScaler::update(const at::Tensor&)). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_update_to_tensor(mixprec_grad_scaler* s,
                                                          void* new_scale);
/** The scale (init_scale before the first scale(), 1.0 when disabled; a sync on CUDA). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_scale(mixprec_grad_scaler* s, double* out);
/** The scale tensor itself, without a sync: a new heap torch::Tensor sharing the scaler's
 *  storage (read it, do not write it); *out_tensor is NULL before the first scale() or when
 *  disabled. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_scale_async(mixprec_grad_scaler* s,
                                                         void** out_tensor);
/** Consecutive clean steps counted towards the next growth (a sync on CUDA). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_growth_tracker(mixprec_grad_scaler* s,
                                                            int64_t* out);
MIXPREC_C_EXPORT int mixprec_grad_scaler_is_enabled(mixprec_grad_scaler* s, int* out);
/* The update rule's factors; a set_ takes effect at the next update() and is not validated, as
 * in PyTorch. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_growth_factor(mixprec_grad_scaler* s, double* out);
MIXPREC_C_EXPORT int mixprec_grad_scaler_set_growth_factor(mixprec_grad_scaler* s, double v);
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_backoff_factor(mixprec_grad_scaler* s, double* out);
MIXPREC_C_EXPORT int mixprec_grad_scaler_set_backoff_factor(mixprec_grad_scaler* s, double v);
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_growth_interval(mixprec_grad_scaler* s,
                                                             int64_t* out);
MIXPREC_C_EXPORT int mixprec_grad_scaler_set_growth_interval(mixprec_grad_scaler* s, int64_t v);

/* ---- the step's outcome and telemetry ------------------------------------------------------ */

/** *out = 1 if the last step() on `optimizer` applied its update, 0 if it was skipped
 *  (GradScaler::last_step_applied). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_last_step_applied(mixprec_grad_scaler* s,
                                                           void* optimizer, int* out);
MIXPREC_C_EXPORT int mixprec_grad_scaler_last_step_applied_shared(mixprec_grad_scaler* s,
                                                                  void* shared_optimizer,
                                                                  int* out);
/** The found_inf (0 or 1, float32, on the scale's device) the last step() on `optimizer`
 *  decided with, without a sync: a new heap torch::Tensor, or NULL if step() never ran. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_last_step_found_inf(mixprec_grad_scaler* s,
                                                             void* optimizer,
                                                             void** out_tensor);
MIXPREC_C_EXPORT int mixprec_grad_scaler_last_step_found_inf_shared(mixprec_grad_scaler* s,
                                                                    void* shared_optimizer,
                                                                    void** out_tensor);
/** The telemetry counters (a sync on CUDA). out->struct_size must be set by the caller to
 *  sizeof(mixprec_grad_scaler_telemetry); another size fails with
 *  MIXPREC_ERROR_INVALID_ARGUMENT. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_get_telemetry(mixprec_grad_scaler* s,
                                                       mixprec_grad_scaler_telemetry* out);

/* ---- gradient clipping --------------------------------------------------------------------- */

/** PyTorch's unscale_ + clip_grad_norm_(params, max_norm, norm_type) for the optimizer's
 *  parameters (GradScaler::clip_grad_norm_): one read of the scaled grads records found_inf and
 *  the unscaled total norm; mixprec's fused optimizers then unscale and clip in their step, any
 *  other optimizer's grads are unscaled and clipped now. norm_type: 2 or INFINITY (other p by a
 *  slower path). *out_norm_tensor: a new heap torch::Tensor, the total norm before clipping
 *  (0-dim float32 on the grads' device, no device sync). Refused (MIXPREC_ERROR_RUNTIME) as
 *  unscale_ refuses: a second call or unscale_ before update(), a call after step(), fp16 grads.
 *  `optimizer`: torch::optim::Optimizer*. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_clip_grad_norm(mixprec_grad_scaler* s, void* optimizer,
                                                        double max_norm, double norm_type,
                                                        void** out_norm_tensor);
/** As mixprec_grad_scaler_clip_grad_norm, for std::shared_ptr<torch::optim::Optimizer>*. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_clip_grad_norm_shared(mixprec_grad_scaler* s,
                                                               void* shared_optimizer,
                                                               double max_norm, double norm_type,
                                                               void** out_norm_tensor);
/** Python's torch.nn.utils.clip_grad_norm_ without a scaler (mixprec::clip_grad_norm_): clips
 *  the grads of `params` (n torch::Tensor*; a parameter without a grad is skipped) in place.
 *  *out_norm_tensor: a new heap torch::Tensor, the total norm before clipping (0-dim float32).
 *  error_if_nonfinite != 0: a NaN or inf norm fails (MIXPREC_ERROR_RUNTIME, PyTorch's message),
 *  no grad changed, which reads the norm (a device sync on CUDA). */
MIXPREC_C_EXPORT int mixprec_clip_grad_norm(void* const* params, size_t n, double max_norm,
                                            double norm_type, int error_if_nonfinite,
                                            void** out_norm_tensor);

/* ---- the gradient-list path ---------------------------------------------------------------- */

/** For bindings that keep their own optimizer code: divides `grads` (n torch::Tensor*; a NULL
 *  entry or an undefined tensor is skipped) in place by the scale and records whether any held
 *  inf/NaN, as unscale_ does for an optimizer; the next update() counts it. *out_found_inf: a
 *  new heap torch::Tensor (a copy), 0 or 1 (float32, on the scale's device): skip the parameter
 *  update when it is not 0; a disabled scaler returns 0. May be called for several lists in one
 *  iteration. Refused (MIXPREC_ERROR_RUNTIME): fp16 grads, as in unscale_ ("Attempting to
 *  unscale FP16 gradients."), and a gradient already unscaled since the last update() (by this
 *  call, unscale_ or step), which would be divided twice; unscale_ and step likewise refuse an
 *  optimizer whose gradients a list unscaled. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_unscale_grads_(mixprec_grad_scaler* s,
                                                        void* const* grads, size_t n,
                                                        void** out_found_inf);

/* ---- state --------------------------------------------------------------------------------- */

/** The scaler's state_dict in torch.save's format (Python: scaler.load_state_dict(
 *  torch.load(path))). With buffer NULL, only *out_size is set. Otherwise the bytes are written
 *  if capacity allows, else MIXPREC_ERROR_BUFFER_TOO_SMALL (*out_size still set). The state is
 *  serialized once for a size query and the copy call after it: the scaler keeps the bytes in
 *  between, unless another call on it comes first (then the copy serializes again). */
MIXPREC_C_EXPORT int mixprec_grad_scaler_state_dict(mixprec_grad_scaler* s, void* buffer,
                                                    size_t capacity, size_t* out_size);
/** Loads what mixprec_grad_scaler_state_dict wrote, or Python's torch.save(scaler.state_dict()).
 *  A bad buffer changes nothing. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_load_state_dict(mixprec_grad_scaler* s,
                                                         const void* data, size_t size);

/* ---- files and streams -------------------------------------------------------------------- */

/** A binding's writer: appends `size` bytes at `data` to its stream; returns 0 when all of them
 *  were written, anything else on failure (the save then fails, saying so). */
typedef int (*mixprec_write_fn)(void* context, const void* data, size_t size);
/** A binding's reader: reads exactly `size` bytes at byte `offset` of its stream into `buffer`;
 *  returns 0 on success, anything else on failure. Reads are random-access (a zip archive is
 *  read from its end first) and never past the size given to the load. */
typedef int (*mixprec_read_fn)(void* context, uint64_t offset, void* buffer, size_t size);

/** The scaler's state_dict bytes (as mixprec_grad_scaler_state_dict) written to the file at
 *  `path` as every mixprec save is (docs/checkpoints.md): a new file beside it, fsynced and
 *  renamed over it, the folder fsynced; a symlink at `path` is written through. On failure the
 *  file is as it was. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_save(mixprec_grad_scaler* s, const char* path);
/** Loads the file at `path` (mixprec_grad_scaler_save's, or Python's
 *  torch.save(scaler.state_dict(), path)), read in place. A bad file changes nothing. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_load(mixprec_grad_scaler* s, const char* path);
/** The state_dict bytes handed to `write` as they are made: no copy of them is held. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_save_to(mixprec_grad_scaler* s, mixprec_write_fn write,
                                                 void* context);
/** Loads `size` bytes read through `read` (a binding's stream), without copying the stream. */
MIXPREC_C_EXPORT int mixprec_grad_scaler_load_from(mixprec_grad_scaler* s, mixprec_read_fn read,
                                                   void* context, uint64_t size);

/* ---- fused optimizers (mixprec::optim) ----------------------------------------------------- */

/* Create mixprec's fused SGD, Adam or AdamW over `params` (n torch::Tensor*, one param group)
 * with torch::optim's option checks and messages. The plain calls return a
 * torch::optim::Optimizer* (free: mixprec_optimizer_free, tch-rs ato_free); the _shared calls
 * a std::shared_ptr<torch::optim::Optimizer>* (free: mixprec_optimizer_free_shared, TorchSharp
 * THSNN_Optimizer_dispose). Stepped by the scaler (mixprec_grad_scaler_step/_step_shared), the
 * kernel gets the scale and found_inf, unscales, checks and updates in one pass, and skips an
 * overflow on the device without a sync. The binding's own step() (ato_step,
 * THSNN_Optimizer_step) is a plain fused step: no scale, no skip. */
MIXPREC_C_EXPORT int mixprec_optim_sgd_create(void* const* params, size_t n, double lr,
                                              double momentum, double dampening,
                                              double weight_decay, int nesterov,
                                              void** out_optimizer);
MIXPREC_C_EXPORT int mixprec_optim_sgd_create_shared(void* const* params, size_t n, double lr,
                                                     double momentum, double dampening,
                                                     double weight_decay, int nesterov,
                                                     void** out_shared_optimizer);
MIXPREC_C_EXPORT int mixprec_optim_adam_create(void* const* params, size_t n, double lr,
                                               double beta1, double beta2, double eps,
                                               double weight_decay, int amsgrad,
                                               void** out_optimizer);
MIXPREC_C_EXPORT int mixprec_optim_adam_create_shared(void* const* params, size_t n, double lr,
                                                      double beta1, double beta2, double eps,
                                                      double weight_decay, int amsgrad,
                                                      void** out_shared_optimizer);
MIXPREC_C_EXPORT int mixprec_optim_adamw_create(void* const* params, size_t n, double lr,
                                                double beta1, double beta2, double eps,
                                                double weight_decay, int amsgrad,
                                                void** out_optimizer);
MIXPREC_C_EXPORT int mixprec_optim_adamw_create_shared(void* const* params, size_t n, double lr,
                                                       double beta1, double beta2, double eps,
                                                       double weight_decay, int amsgrad,
                                                       void** out_shared_optimizer);
/** Deletes a torch::optim::Optimizer* (any optimizer). NULL is a no-op. */
MIXPREC_C_EXPORT void mixprec_optimizer_free(void* optimizer);
/** Deletes a std::shared_ptr<torch::optim::Optimizer>*. NULL is a no-op. */
MIXPREC_C_EXPORT void mixprec_optimizer_free_shared(void* shared_optimizer);

/* ---- an optimizer's learning rate and state ------------------------------------------------ */

/** The learning rate of the optimizer's first param group (any torch::optim optimizer;
 *  MIXPREC_ERROR_RUNTIME if it has no group). */
MIXPREC_C_EXPORT int mixprec_optimizer_get_lr(void* optimizer, double* out);
MIXPREC_C_EXPORT int mixprec_optimizer_get_lr_shared(void* shared_optimizer, double* out);
/** Sets every param group's learning rate, as a scheduler does (not validated, as in PyTorch). */
MIXPREC_C_EXPORT int mixprec_optimizer_set_lr(void* optimizer, double lr);
MIXPREC_C_EXPORT int mixprec_optimizer_set_lr_shared(void* shared_optimizer, double lr);
/** The optimizer's state_dict (moments, steps, param groups) in torch.save's format, as Python's
 *  optimizer.state_dict() lays it out (Python: opt.load_state_dict(torch.load(path))), for
 *  mixprec's and torch::optim's SGD, Adam and AdamW: serialized once into a new buffer of
 *  *out_size bytes, which the caller frees with mixprec_bytes_free. */
MIXPREC_C_EXPORT int mixprec_optimizer_state_dict(void* optimizer, void** out_bytes,
                                                  size_t* out_size);
MIXPREC_C_EXPORT int mixprec_optimizer_state_dict_shared(void* shared_optimizer,
                                                         void** out_bytes, size_t* out_size);
/** Loads what mixprec_optimizer_state_dict wrote, or Python's torch.save(opt.state_dict()),
 *  matching groups and parameters by position. A bad buffer changes nothing. */
MIXPREC_C_EXPORT int mixprec_optimizer_load_state_dict(void* optimizer, const void* data,
                                                       size_t size);
MIXPREC_C_EXPORT int mixprec_optimizer_load_state_dict_shared(void* shared_optimizer,
                                                              const void* data, size_t size);
/** The optimizer's state_dict bytes (as mixprec_optimizer_state_dict) written durably to
 *  `path`, handed to `write`, or loaded from `path` or through `read`, as the scaler's calls
 *  above do. */
MIXPREC_C_EXPORT int mixprec_optimizer_save(void* optimizer, const char* path);
MIXPREC_C_EXPORT int mixprec_optimizer_save_shared(void* shared_optimizer, const char* path);
MIXPREC_C_EXPORT int mixprec_optimizer_load(void* optimizer, const char* path);
MIXPREC_C_EXPORT int mixprec_optimizer_load_shared(void* shared_optimizer, const char* path);
MIXPREC_C_EXPORT int mixprec_optimizer_save_to(void* optimizer, mixprec_write_fn write,
                                               void* context);
MIXPREC_C_EXPORT int mixprec_optimizer_save_to_shared(void* shared_optimizer,
                                                      mixprec_write_fn write, void* context);
MIXPREC_C_EXPORT int mixprec_optimizer_load_from(void* optimizer, mixprec_read_fn read,
                                                 void* context, uint64_t size);
MIXPREC_C_EXPORT int mixprec_optimizer_load_from_shared(void* shared_optimizer,
                                                        mixprec_read_fn read, void* context,
                                                        uint64_t size);
/** Frees a buffer this API allocated (out_bytes). NULL is a no-op. */
MIXPREC_C_EXPORT void mixprec_bytes_free(void* bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MIXPREC_C_API_H_ */
