// Trains three small linear regressions from plain C (C99) through mixprec's C ABI alone, as a
// LibTorch binding does (docs/bindings.md shows excerpts): the tensors and the binding's own SGD
// come from the binding's C layer (mini_binding.h, a stand-in for tch-rs's torch_api.h), the loss
// scaling and a fused Adam from libmixprec_c. Three paths: the binding's optimizer, mixprec's fused
// optimizer, and the gradient list (the binding's own update code). One iteration of each
// overflows on purpose and must be skipped with the scale halved; the scaler's state goes through
// bytes into a second scaler. Exits non-zero on any failure (CTest example.c_api).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mini_binding.h"
#include "mixprec/c_api.h"

enum { kRows = 64, kFeatures = 3, kIterations = 40, kGrowthInterval = 10 };
static const double kLearningRate = 0.1;

// Prints the failed call with mixprec_last_error() and returns 1; returns 0 for MIXPREC_OK.
static int failed(int status, const char* call) {
  if (status == MIXPREC_OK) return 0;
  fprintf(stderr, "FAIL: %s returned %d: %s\n", call, status, mixprec_last_error());
  return 1;
}

// Prints the binding layer's last error and returns 1 if a binding call failed.
static int binding_failed(const char* what) {
  char* err = mb_get_and_reset_last_err();
  if (err == NULL) return 0;
  fprintf(stderr, "FAIL: %s: %s\n", what, err);
  free(err);
  return 1;
}

static int expect(int ok, const char* what) {
  if (!ok) fprintf(stderr, "FAIL: %s\n", what);
  return !ok;
}

typedef struct Data {
  mb_tensor x, y;  // kRows x kFeatures inputs, kRows x 1 targets y = x w* + b*
} Data;

typedef struct Model {
  mb_tensor w, b;  // the parameters, kFeatures x 1 and 1 x 1, from zero
} Model;

// The scale the scaler must hold: PyTorch's rule with growth 2, backoff 0.5.
typedef struct Expected {
  double scale;
  int tracker;  // clean steps towards the next growth
} Expected;

static void expect_update(Expected* e, int overflow) {
  if (overflow) {
    e->scale *= 0.5;
    e->tracker = 0;
  } else if (++e->tracker == kGrowthInterval) {
    e->scale *= 2.0;
    e->tracker = 0;
  }
}

// One training iteration of `m`. With an optimizer (the binding's or a fused one) the scaler
// steps it; with optimizer NULL the binding updates the parameters itself (the gradient list).
// `overflow` makes one gradient inf, as an fp16 backward can. *stepped: whether `m` changed.
static int iterate(const Data* d, Model* m, mixprec_grad_scaler* scaler, void* optimizer,
                   int overflow, double* loss_value, int* stepped) {
  int ok = 0;
  mb_tensor xw = NULL, pred = NULL, loss = NULL, bad = NULL;
  void* scaled = NULL;
  void* grads[2] = {NULL, NULL};
  void* found_inf = NULL;
  if (optimizer != NULL) {
    mb_zero_grad(optimizer);
  } else {
    mb_zero_grad_of(m->w);
    mb_zero_grad_of(m->b);
  }
  xw = mb_matmul(d->x, m->w);
  pred = mb_add(xw, m->b);
  loss = mb_mse_loss(pred, d->y);
  if (binding_failed("forward")) goto done;
  *loss_value = mb_item(loss);

  // scaler.scale(loss).backward(); `scaled` is a new torch::Tensor*, the caller's to free.
  if (failed(mixprec_grad_scaler_scale(scaler, loss, &scaled), "mixprec_grad_scaler_scale")) {
    goto done;
  }
  mb_backward(scaled);
  if (overflow) {
    bad = mb_grad(m->w);
    mb_mul_scalar_(bad, INFINITY);
  }
  if (binding_failed("backward")) goto done;

  if (optimizer != NULL) {
    // scaler.step(optimizer): unscales, then skips the step if a gradient holds inf/NaN.
    if (failed(mixprec_grad_scaler_step(scaler, optimizer, stepped), "mixprec_grad_scaler_step")) {
      goto done;
    }
  } else {
    // The gradient-list path: unscale and check the grads, then the binding's own update.
    grads[0] = mb_grad(m->w);
    grads[1] = mb_grad(m->b);
    if (failed(mixprec_grad_scaler_unscale_grads_(scaler, grads, 2, &found_inf),
               "mixprec_grad_scaler_unscale_grads_")) {
      goto done;
    }
    *stepped = mb_item(found_inf) == 0.0;  // reading it waits for the device (CUDA)
    if (*stepped) {
      mb_sub_scaled_(m->w, grads[0], kLearningRate);
      mb_sub_scaled_(m->b, grads[1], kLearningRate);
    }
    if (binding_failed("the binding's update")) goto done;
  }
  if (failed(mixprec_grad_scaler_update(scaler), "mixprec_grad_scaler_update")) goto done;
  ok = 1;
done:
  mb_free(scaled);  // the binding's own free call deletes mixprec's tensors too (tch-rs at_free)
  mixprec_tensor_free(found_inf);
  mb_free(grads[0]);
  mb_free(grads[1]);
  mb_free(bad);
  mb_free(loss);
  mb_free(pred);
  mb_free(xw);
  return ok;
}

// Trains `m` for kIterations, overflowing at iteration `overflow_at`, and checks each step's
// outcome, the parameters at the skip, the scale after every update, and that the loss fell
// below 1% of its first value.
static int train(const char* name, const Data* d, Model* m, mixprec_grad_scaler* scaler,
                 void* optimizer, int overflow_at, Expected* e) {
  double first = NAN, loss = NAN, scale = 0.0;
  int it;
  for (it = 0; it < kIterations; ++it) {
    const int overflow = it == overflow_at;
    int stepped = -1, applied = -1, same = 0;
    mb_tensor w_before = mb_clone(m->w);
    const int ok = iterate(d, m, scaler, optimizer, overflow, &loss, &stepped);
    same = mb_equal(w_before, m->w);
    mb_free(w_before);
    if (!ok || binding_failed(name)) return 1;
    if (failed(mixprec_grad_scaler_get_scale(scaler, &scale), "mixprec_grad_scaler_get_scale")) {
      return 1;
    }
    if (optimizer != NULL &&
        failed(mixprec_grad_scaler_last_step_applied(scaler, optimizer, &applied),
               "mixprec_grad_scaler_last_step_applied")) {
      return 1;
    }
    expect_update(e, overflow);
    if (it == 0) first = loss;
    if (expect(stepped == !overflow, "a step is skipped exactly at the overflow") ||
        expect(optimizer == NULL || applied == stepped, "last_step_applied agrees with step") ||
        expect(!overflow || same, "the skipped step leaves the parameters unchanged") ||
        expect(scale == e->scale, "the scale follows PyTorch's rule")) {
      fprintf(stderr, "  %s, iteration %d: stepped %d, scale %g (expected %g)\n", name, it, stepped,
              scale, e->scale);
      return 1;
    }
  }
  printf("%-26s loss %.3g -> %.3g, scale %g\n", name, first, loss, scale);
  return expect(loss < 0.01 * first, "the loss falls below 1% of its first value");
}

// The error convention: a status, mixprec_last_error(), out-parameters untouched on failure.
static int check_errors(mixprec_grad_scaler* scaler, void* state, size_t size) {
  double scale = -1.0;
  size_t needed = 0;
  mixprec_grad_scaler* none = NULL;
  mixprec_grad_scaler_options bad;
  mixprec_grad_scaler_options_default(&bad);
  bad.struct_size = 0;  // not filled by this library's _default
  return expect(mixprec_grad_scaler_get_scale(NULL, &scale) == MIXPREC_ERROR_NULL_ARGUMENT &&
                    strstr(mixprec_last_error(), "NULL") != NULL && scale == -1.0,
                "a NULL scaler is MIXPREC_ERROR_NULL_ARGUMENT") ||
         expect(mixprec_grad_scaler_create(&bad, &none) == MIXPREC_ERROR_INVALID_ARGUMENT &&
                    none == NULL,
                "a bad struct_size is MIXPREC_ERROR_INVALID_ARGUMENT") ||
         expect(mixprec_grad_scaler_state_dict(scaler, state, size - 1, &needed) ==
                        MIXPREC_ERROR_BUFFER_TOO_SMALL &&
                    needed == size,
                "a short buffer is MIXPREC_ERROR_BUFFER_TOO_SMALL, with the size needed") ||
         expect(mixprec_grad_scaler_load_state_dict(scaler, "not a state", 11) != MIXPREC_OK &&
                    mixprec_last_error()[0] != '\0',
                "bytes that are no state dict are refused");
}

static int make_model(Model* m) {
  m->w = mb_zeros(kFeatures, 1, 1);
  m->b = mb_zeros(1, 1, 1);
  return binding_failed("the model");
}

int main(void) {
  static const float w_star[kFeatures] = {2.0f, -3.0f, 0.5f};
  static const float b_star[1] = {1.0f};
  int rc = 1;
  Data d = {NULL, NULL};
  Model a = {NULL, NULL}, b = {NULL, NULL}, c = {NULL, NULL};
  mb_tensor w_true = NULL, b_true = NULL, xw = NULL;
  mb_optimizer sgd = NULL;
  void* adam = NULL;
  mixprec_grad_scaler* scaler = NULL;
  mixprec_grad_scaler* resumed = NULL;
  void* state = NULL;
  size_t size = 0;
  int64_t tracker = -1, interval = -1;
  double scale = 0.0;
  Expected e = {1024.0, 0};
  mixprec_grad_scaler_options options;
  mixprec_grad_scaler_telemetry telemetry;

  // The library loaded must have the ABI this program was compiled against.
  if (expect(mixprec_abi_version() == MIXPREC_C_ABI_VERSION, "the C ABI version")) return 1;
  printf("mixprec %s, C ABI %d\n", mixprec_version(), mixprec_abi_version());

  mb_manual_seed(0);
  d.x = mb_randn(kRows, kFeatures);
  w_true = mb_from_floats(w_star, kFeatures, 1);
  b_true = mb_from_floats(b_star, 1, 1);
  xw = mb_matmul(d.x, w_true);
  d.y = mb_add(xw, b_true);
  if (binding_failed("the data") || make_model(&a) || make_model(&b) || make_model(&c)) goto done;

  // A scaler with PyTorch's defaults but the initial scale and the growth interval.
  mixprec_grad_scaler_options_default(&options);  // sets options.struct_size
  mixprec_grad_scaler_options_set_init_scale(&options, 1024.0);
  options.growth_interval = kGrowthInterval;  // the fields can be set directly too
  if (failed(mixprec_grad_scaler_create(&options, &scaler), "mixprec_grad_scaler_create")) {
    goto done;
  }

  // 1. The binding's own optimizer, a torch::optim::Optimizer* (tch-rs's convention).
  {
    void* params[2] = {a.w, a.b};
    sgd = mb_sgd_create(params, 2, kLearningRate);
  }
  if (binding_failed("mb_sgd_create") || train("the binding's SGD", &d, &a, scaler, sgd, 15, &e)) {
    goto done;
  }
  memset(&telemetry, 0, sizeof telemetry);
  telemetry.struct_size = sizeof telemetry;  // the caller says which fields it knows
  if (failed(mixprec_grad_scaler_get_telemetry(scaler, &telemetry),
             "mixprec_grad_scaler_get_telemetry") ||
      expect(telemetry.iterations == kIterations && telemetry.skipped_steps == 1 &&
                 telemetry.backoffs == 1 && telemetry.last_overflow_iteration == 15,
             "the telemetry counts one skipped step")) {
    goto done;
  }

  // 2. The state as bytes in torch.save's format (Python: torch.load), into a new scaler.
  if (failed(mixprec_grad_scaler_state_dict(scaler, NULL, 0, &size), "state_dict (size)")) {
    goto done;
  }
  state = malloc(size);
  if (expect(state != NULL, "malloc") ||
      failed(mixprec_grad_scaler_state_dict(scaler, state, size, &size), "state_dict") ||
      failed(mixprec_grad_scaler_create(NULL, &resumed), "mixprec_grad_scaler_create") ||
      failed(mixprec_grad_scaler_load_state_dict(resumed, state, size), "load_state_dict")) {
    goto done;
  }
  if (failed(mixprec_grad_scaler_get_scale(resumed, &scale), "get_scale") ||
      failed(mixprec_grad_scaler_get_growth_tracker(resumed, &tracker), "get_growth_tracker") ||
      failed(mixprec_grad_scaler_get_growth_interval(resumed, &interval), "get_growth_interval") ||
      expect(scale == e.scale && tracker == e.tracker && interval == kGrowthInterval,
             "the loaded scaler continues where the saved one stopped") ||
      check_errors(resumed, state, size)) {
    goto done;
  }
  printf("state: %zu bytes, scale %g, growth tracker %lld\n", size, scale, (long long)tracker);

  // 3. mixprec's fused Adam: its step skips an overflow on the device, without a host sync.
  {
    void* params[2] = {b.w, b.b};
    if (failed(mixprec_optim_adam_create(params, 2, 0.3, 0.9, 0.999, 1e-8, 0.0, 0, &adam),
               "mixprec_optim_adam_create")) {
      goto done;
    }
  }
  if (train("mixprec's fused Adam", &d, &b, resumed, adam, 5, &e)) goto done;

  // 4. The gradient list, for a binding that keeps its own optimizer code (NULL optimizer).
  if (train("the binding's own update", &d, &c, resumed, NULL, 20, &e)) goto done;

  rc = 0;
  printf("OK\n");
done:
  // The binding frees its tensors and optimizers; mixprec's objects are freed by mixprec (or by
  // the binding's calls for tensors and optimizers, which delete the same C++ types).
  mixprec_optimizer_free(adam);
  mb_optimizer_free(sgd);
  mixprec_grad_scaler_destroy(resumed);
  mixprec_grad_scaler_destroy(scaler);
  free(state);
  mb_free(d.x);
  mb_free(d.y);
  mb_free(xw);
  mb_free(w_true);
  mb_free(b_true);
  mb_free(a.w);
  mb_free(a.b);
  mb_free(b.w);
  mb_free(b.b);
  mb_free(c.w);
  mb_free(c.b);
  return rc;
}
