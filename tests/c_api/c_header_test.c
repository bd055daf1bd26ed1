/* CTest c_api.c_header: include/mixprec/c_api.h compiles as C99 (no extensions, -Wpedantic
 * -Werror), and what a plain C caller can do without tensors works through libmixprec_c.so alone:
 * options, the scaler's getters and setters, telemetry, state bytes, and the error convention.
 * Each failing call here also shows that no C++ exception escapes: C cannot catch one, so an
 * escaping exception would terminate this process. Exits non-zero on any mismatch. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec/c_api.h"

static int failures = 0;

/* Counts a failure, saying where and what, when `cond` is false. */
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Checks that `call` returned `status` and that the last error contains `text`. */
#define CHECK_FAILS(call, status, text)                                                     \
  do {                                                                                      \
    int rc_ = (call);                                                                       \
    if (rc_ != (status) || strstr(mixprec_last_error(), (text)) == NULL) {                  \
      fprintf(stderr,                                                                       \
              "%s:%d: %s returned %d (expected %d), last error \"%s\" (expected "           \
              "to contain \"%s\")\n",                                                       \
              __FILE__, __LINE__, #call, rc_, (int)(status), mixprec_last_error(), (text)); \
      ++failures;                                                                           \
    }                                                                                       \
  } while (0)

/* A scaler made from `options`, or NULL after counting a failure. */
static mixprec_grad_scaler* make_scaler(const mixprec_grad_scaler_options* options) {
  mixprec_grad_scaler* s = NULL;
  if (mixprec_grad_scaler_create(options, &s) != MIXPREC_OK || s == NULL) {
    fprintf(stderr, "mixprec_grad_scaler_create failed: %s\n", mixprec_last_error());
    ++failures;
    return NULL;
  }
  return s;
}

/* Field by field (the struct has padding). */
static int same_options(const mixprec_grad_scaler_options* a,
                        const mixprec_grad_scaler_options* b) {
  return a->struct_size == b->struct_size && a->init_scale == b->init_scale &&
         a->growth_factor == b->growth_factor && a->backoff_factor == b->backoff_factor &&
         a->growth_interval == b->growth_interval && a->enabled == b->enabled &&
         a->hysteresis == b->hysteresis && a->hysteresis_refill == b->hysteresis_refill &&
         a->min_scale == b->min_scale && a->max_scale == b->max_scale &&
         a->at_min_scale == b->at_min_scale && a->history_size == b->history_size;
}

static void library(void) {
  CHECK(mixprec_abi_version() == MIXPREC_C_ABI_VERSION);
  CHECK(strcmp(mixprec_version(), MIXPREC_EXPECTED_VERSION) == 0);
  mixprec_tensor_free(NULL);
  mixprec_optimizer_free(NULL);
  mixprec_optimizer_free_shared(NULL);
  mixprec_grad_scaler_destroy(NULL);
}

/* PyTorch's defaults (torch.amp.GradScaler's signature) and mixprec's neutral extensions. */
static void options(void) {
  mixprec_grad_scaler_options o;
  memset(&o, 0xab, sizeof o);
  mixprec_grad_scaler_options_default(&o);
  CHECK(o.struct_size == sizeof(mixprec_grad_scaler_options));
  CHECK(o.init_scale == 65536.0);
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
  CHECK(o.enabled == 1);
  CHECK(o.hysteresis == 1);
  CHECK(o.hysteresis_refill == MIXPREC_HYSTERESIS_REFILL_ON_GROWTH);
  CHECK(o.min_scale == 0.0);
  CHECK(o.max_scale == (double)FLT_MAX);
  CHECK(o.at_min_scale == MIXPREC_AT_MIN_SCALE_CLAMP);
  CHECK(o.history_size == 0);

  {
    /* _init with this header's size gives the same struct; a size no version has is refused. */
    mixprec_grad_scaler_options init;
    memset(&init, 0x5a, sizeof init);
    CHECK(mixprec_grad_scaler_options_init(&init, sizeof init) == MIXPREC_OK);
    CHECK(same_options(&init, &o));
    memset(&init, 0x5a, sizeof init);
    CHECK_FAILS(mixprec_grad_scaler_options_init(&init, 3), MIXPREC_ERROR_INVALID_ARGUMENT,
                "struct_size");
    CHECK(init.init_scale != 65536.0); /* left alone */
    CHECK_FAILS(mixprec_grad_scaler_options_init(NULL, sizeof init), MIXPREC_ERROR_NULL_ARGUMENT,
                "mixprec_grad_scaler_options_init");
  }
  mixprec_grad_scaler_options_set_init_scale(&o, 1024.0);
  mixprec_grad_scaler_options_set_growth_factor(&o, 3.0);
  mixprec_grad_scaler_options_set_backoff_factor(&o, 0.25);
  mixprec_grad_scaler_options_set_growth_interval(&o, 7);
  mixprec_grad_scaler_options_set_enabled(&o, 0);
  CHECK(o.init_scale == 1024.0 && o.growth_factor == 3.0 && o.backoff_factor == 0.25);
  CHECK(o.growth_interval == 7 && o.enabled == 0);

  {
    /* The exported function (which bindings call; the header's macro is _init with sizeof)
       writes exactly the version-1 struct: this header's, as no field has been appended yet. */
    mixprec_grad_scaler_options v1, current;
    memset(&v1, 0x5a, sizeof v1);
    (mixprec_grad_scaler_options_default)(&v1);
    mixprec_grad_scaler_options_default(&current);
    CHECK(same_options(&v1, &current));
  }

  /* NULL is a no-op for the exported _default and every setter; through the macro, _init
     refuses it. */
  (mixprec_grad_scaler_options_default)(NULL);
  mixprec_grad_scaler_options_default(NULL);
  CHECK(strstr(mixprec_last_error(), "mixprec_grad_scaler_options_init: out is NULL") != NULL);
  mixprec_grad_scaler_options_set_init_scale(NULL, 1.0);
  mixprec_grad_scaler_options_set_growth_factor(NULL, 1.0);
  mixprec_grad_scaler_options_set_backoff_factor(NULL, 1.0);
  mixprec_grad_scaler_options_set_growth_interval(NULL, 1);
  mixprec_grad_scaler_options_set_enabled(NULL, 1);
}

static void scaler_getters_and_setters(void) {
  mixprec_grad_scaler_options o;
  mixprec_grad_scaler* s;
  double d = 0.0;
  int64_t i = -1;
  int enabled = -1;
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_init_scale(&o, 1024.0);
  mixprec_grad_scaler_options_set_growth_interval(&o, 7);
  s = make_scaler(&o);
  if (s == NULL) return;
  CHECK(mixprec_grad_scaler_get_scale(s, &d) == MIXPREC_OK && d == 1024.0);
  CHECK(mixprec_grad_scaler_is_enabled(s, &enabled) == MIXPREC_OK && enabled == 1);
  CHECK(mixprec_grad_scaler_get_growth_tracker(s, &i) == MIXPREC_OK && i == 0);
  CHECK(mixprec_grad_scaler_get_growth_interval(s, &i) == MIXPREC_OK && i == 7);
  CHECK(mixprec_grad_scaler_get_growth_factor(s, &d) == MIXPREC_OK && d == 2.0);
  CHECK(mixprec_grad_scaler_get_backoff_factor(s, &d) == MIXPREC_OK && d == 0.5);
  CHECK(mixprec_grad_scaler_set_growth_factor(s, 4.0) == MIXPREC_OK);
  CHECK(mixprec_grad_scaler_set_backoff_factor(s, 0.125) == MIXPREC_OK);
  CHECK(mixprec_grad_scaler_set_growth_interval(s, 11) == MIXPREC_OK);
  CHECK(mixprec_grad_scaler_get_growth_factor(s, &d) == MIXPREC_OK && d == 4.0);
  CHECK(mixprec_grad_scaler_get_backoff_factor(s, &d) == MIXPREC_OK && d == 0.125);
  CHECK(mixprec_grad_scaler_get_growth_interval(s, &i) == MIXPREC_OK && i == 11);
  {
    void* scale_tensor = &d; /* not a tensor: must be replaced by NULL before any scale() */
    CHECK(mixprec_grad_scaler_get_scale_async(s, &scale_tensor) == MIXPREC_OK);
    CHECK(scale_tensor == NULL);
  }
  mixprec_grad_scaler_destroy(s);

  /* Disabled: scale 1.0, reported as disabled. NULL options: all defaults. */
  mixprec_grad_scaler_options_set_enabled(&o, 0);
  s = make_scaler(&o);
  if (s != NULL) {
    CHECK(mixprec_grad_scaler_is_enabled(s, &enabled) == MIXPREC_OK && enabled == 0);
    CHECK(mixprec_grad_scaler_get_scale(s, &d) == MIXPREC_OK && d == 1.0);
    mixprec_grad_scaler_destroy(s);
  }
  s = make_scaler(NULL);
  if (s != NULL) {
    CHECK(mixprec_grad_scaler_get_scale(s, &d) == MIXPREC_OK && d == 65536.0);
    mixprec_grad_scaler_destroy(s);
  }
}

static void telemetry(void) {
  mixprec_grad_scaler* s = make_scaler(NULL);
  mixprec_grad_scaler_telemetry t;
  if (s == NULL) return;
  memset(&t, 0x5a, sizeof t);
  t.struct_size = sizeof t;
  CHECK(mixprec_grad_scaler_get_telemetry(s, &t) == MIXPREC_OK);
  CHECK(t.iterations == 0 && t.skipped_steps == 0 && t.growths == 0 && t.backoffs == 0);
  CHECK(t.consecutive_overflows == 0 && t.last_overflow_iteration == -1);
  CHECK(t.hysteresis_tracker == 1); /* the default hysteresis: one overflow per backoff */
  /* A struct_size this library does not know: refused, the struct left alone. */
  memset(&t, 0x5a, sizeof t);
  t.struct_size = sizeof t - 1;
  CHECK_FAILS(mixprec_grad_scaler_get_telemetry(s, &t), MIXPREC_ERROR_INVALID_ARGUMENT,
              "struct_size");
  CHECK(t.iterations == 0x5a5a5a5a5a5a5a5a);
  mixprec_grad_scaler_destroy(s);
}

/* The state as bytes (torch.save's format) and back into another scaler. */
static void state_bytes(void) {
  mixprec_grad_scaler_options o;
  mixprec_grad_scaler *from, *to;
  size_t size = 0, small_size = 0;
  char* bytes;
  double d = 0.0;
  int64_t i = 0;
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_init_scale(&o, 512.0);
  mixprec_grad_scaler_options_set_growth_factor(&o, 3.0);
  mixprec_grad_scaler_options_set_backoff_factor(&o, 0.25);
  mixprec_grad_scaler_options_set_growth_interval(&o, 5);
  from = make_scaler(&o);
  to = make_scaler(NULL);
  if (from == NULL || to == NULL) return;
  CHECK(mixprec_grad_scaler_state_dict(from, NULL, 0, &size) == MIXPREC_OK && size > 0);
  bytes = (char*)malloc(size);
  if (bytes == NULL) exit(2);
  CHECK_FAILS(mixprec_grad_scaler_state_dict(from, bytes, size - 1, &small_size),
              MIXPREC_ERROR_BUFFER_TOO_SMALL, "mixprec_grad_scaler_state_dict");
  CHECK(small_size == size);
  CHECK(mixprec_grad_scaler_state_dict(from, bytes, size, &size) == MIXPREC_OK);
  CHECK(mixprec_grad_scaler_load_state_dict(to, bytes, size) == MIXPREC_OK);
  CHECK(mixprec_grad_scaler_get_scale(to, &d) == MIXPREC_OK && d == 512.0);
  CHECK(mixprec_grad_scaler_get_growth_factor(to, &d) == MIXPREC_OK && d == 3.0);
  CHECK(mixprec_grad_scaler_get_backoff_factor(to, &d) == MIXPREC_OK && d == 0.25);
  CHECK(mixprec_grad_scaler_get_growth_interval(to, &i) == MIXPREC_OK && i == 5);

  /* Garbage changes nothing. */
  memset(bytes, 'x', size);
  CHECK(mixprec_grad_scaler_load_state_dict(to, bytes, size) == MIXPREC_ERROR_RUNTIME);
  CHECK(mixprec_last_error()[0] != '\0');
  CHECK(mixprec_grad_scaler_get_scale(to, &d) == MIXPREC_OK && d == 512.0);
  free(bytes);
  mixprec_grad_scaler_destroy(from);
  mixprec_grad_scaler_destroy(to);
}

/* NULL handles and out pointers: MIXPREC_ERROR_NULL_ARGUMENT naming the call, never a crash. */
static void null_arguments(void) {
  mixprec_grad_scaler* s = make_scaler(NULL);
  double d = 7.0;
  int flag = 7;
  int64_t i = 7;
  if (s == NULL) return;
  CHECK_FAILS(mixprec_grad_scaler_create(NULL, NULL), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_create");
  CHECK_FAILS(mixprec_grad_scaler_get_scale(NULL, &d), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_get_scale");
  CHECK_FAILS(mixprec_grad_scaler_get_scale(s, NULL), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_get_scale");
  CHECK_FAILS(mixprec_grad_scaler_is_enabled(NULL, &flag), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_is_enabled");
  CHECK_FAILS(mixprec_grad_scaler_get_growth_tracker(NULL, &i), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_get_growth_tracker");
  CHECK_FAILS(mixprec_grad_scaler_update(NULL), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_update");
  CHECK_FAILS(mixprec_grad_scaler_scale(s, NULL, NULL), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_scale");
  CHECK_FAILS(mixprec_grad_scaler_step(s, NULL, NULL), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_step");
  CHECK_FAILS(mixprec_grad_scaler_load_state_dict(s, NULL, 10), MIXPREC_ERROR_NULL_ARGUMENT,
              "mixprec_grad_scaler_load_state_dict");
  CHECK(d == 7.0 && flag == 7 && i == 7); /* failed calls leave their out-parameters alone */
  mixprec_grad_scaler_destroy(s);
}

/* Invalid options: the C++ constructor's message (naming the option), no scaler made. */
static void invalid_options(void) {
  mixprec_grad_scaler_options o;
  mixprec_grad_scaler* s = (mixprec_grad_scaler*)&o; /* a sentinel the failures must keep */
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_init_scale(&o, 0.0);
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_RUNTIME, "init_scale");
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_growth_factor(&o, 1.0);
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_RUNTIME, "growth_factor");
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_backoff_factor(&o, 1.5);
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_RUNTIME, "backoff_factor");
  mixprec_grad_scaler_options_default(&o);
  mixprec_grad_scaler_options_set_growth_interval(&o, 0);
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_RUNTIME, "growth_interval");
  mixprec_grad_scaler_options_default(&o);
  o.at_min_scale = 7;
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_INVALID_ARGUMENT, "at_min_scale");
  mixprec_grad_scaler_options_default(&o);
  o.struct_size = 0; /* not filled by mixprec_grad_scaler_options_default */
  CHECK_FAILS(mixprec_grad_scaler_create(&o, &s), MIXPREC_ERROR_INVALID_ARGUMENT, "struct_size");
  CHECK(s == (mixprec_grad_scaler*)&o);
}

/* The last error stays until the next failing call: successes do not clear it. */
static void last_error_survives_success(void) {
  mixprec_grad_scaler* s = make_scaler(NULL);
  double d;
  char saved[512];
  if (s == NULL) return;
  CHECK(mixprec_grad_scaler_get_scale(NULL, &d) != MIXPREC_OK);
  strncpy(saved, mixprec_last_error(), sizeof saved - 1);
  saved[sizeof saved - 1] = '\0';
  CHECK(saved[0] != '\0');
  CHECK(mixprec_grad_scaler_get_scale(s, &d) == MIXPREC_OK);
  CHECK(strcmp(mixprec_last_error(), saved) == 0);
  mixprec_grad_scaler_destroy(s);
}

int main(void) {
  CHECK(strcmp(mixprec_last_error(), "") == 0); /* no failure yet on this thread */
  library();
  options();
  scaler_getters_and_setters();
  telemetry();
  state_bytes();
  null_arguments();
  invalid_options();
  last_error_survives_success();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api.c_header: all checks passed\n");
  return 0;
}
