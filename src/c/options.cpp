// The C ABI's options struct (include/mixprec/c_api.h): defaults written for exactly the caller's
// version of the struct, and read back into GradScalerOptions. No LibTorch header: tests build
// this file against a later header too (tests/c_api/options_v2_test.cpp).
#include "c/options.h"

#include <cstring>
#include <string>

#include "c/guard.h"

static_assert(sizeof(mixprec_grad_scaler_options) >= mixprec::c_api::kOptionsV1Size);

namespace mixprec::c_api {
namespace {

// PyTorch's defaults (and mixprec's neutral extensions) in the first `size` bytes of *out, a
// known version's size; the bytes past the version-1 fields are zero.
void write_defaults(mixprec_grad_scaler_options* out, std::size_t size) {
  const GradScalerOptions d;
  std::memset(out, 0, size);
  out->struct_size = size;
  out->init_scale = d.init_scale();
  out->growth_factor = d.growth_factor();
  out->backoff_factor = d.backoff_factor();
  out->growth_interval = d.growth_interval();
  out->enabled = d.enabled() ? 1 : 0;
  out->hysteresis = d.hysteresis();
  out->hysteresis_refill = MIXPREC_HYSTERESIS_REFILL_ON_GROWTH;
  out->min_scale = d.min_scale();
  out->max_scale = d.max_scale();
  out->at_min_scale = MIXPREC_AT_MIN_SCALE_CLAMP;
  out->history_size = d.history_size();
}

}  // namespace

bool known_options_size(std::size_t size) {
  return size == kOptionsV1Size || size == sizeof(mixprec_grad_scaler_options);
}

GradScalerOptions to_options(const mixprec_grad_scaler_options& o) {
  const char* call = "mixprec_grad_scaler_create";
  if (!known_options_size(o.struct_size)) {
    invalid(std::string(call) + ": options->struct_size is " + std::to_string(o.struct_size) +
            ", the size of no version of mixprec_grad_scaler_options this library knows (" +
            std::to_string(sizeof(mixprec_grad_scaler_options)) +
            " bytes): fill the struct with mixprec_grad_scaler_options_default first");
  }
  if (o.hysteresis_refill != MIXPREC_HYSTERESIS_REFILL_ON_GROWTH &&
      o.hysteresis_refill != MIXPREC_HYSTERESIS_REFILL_ON_CLEAN_STEP) {
    invalid(std::string(call) + ": options->hysteresis_refill " +
            std::to_string(o.hysteresis_refill) + " is not a mixprec_hysteresis_refill");
  }
  if (o.at_min_scale != MIXPREC_AT_MIN_SCALE_CLAMP &&
      o.at_min_scale != MIXPREC_AT_MIN_SCALE_ERROR) {
    invalid(std::string(call) + ": options->at_min_scale " + std::to_string(o.at_min_scale) +
            " is not a mixprec_at_min_scale");
  }
  // Every field is version 1's so far; a field appended later is read only when
  // o.struct_size reaches past it, and keeps its default otherwise.
  return GradScalerOptions()
      .init_scale(o.init_scale)
      .growth_factor(o.growth_factor)
      .backoff_factor(o.backoff_factor)
      .growth_interval(o.growth_interval)
      .enabled(o.enabled != 0)
      .hysteresis(o.hysteresis)
      .hysteresis_refill(o.hysteresis_refill == MIXPREC_HYSTERESIS_REFILL_ON_CLEAN_STEP
                             ? core::HysteresisRefill::kOnCleanStep
                             : core::HysteresisRefill::kOnGrowth)
      .min_scale(o.min_scale)
      .max_scale(o.max_scale)
      .at_min_scale(o.at_min_scale == MIXPREC_AT_MIN_SCALE_ERROR ? AtMinScale::kThrow
                                                                 : AtMinScale::kClamp)
      .history_size(o.history_size);
}

}  // namespace mixprec::c_api

using mixprec::c_api::guarded;

extern "C" {

// Parenthesized: c_api.h's function-like macro of the same name must not expand here.
void(mixprec_grad_scaler_options_default)(mixprec_grad_scaler_options* out) {
  // The version-1 struct, forever: a caller compiled with an older header has no room for
  // fields appended later; _create gives those their defaults from the struct_size.
  if (out != nullptr) mixprec::c_api::write_defaults(out, mixprec::c_api::kOptionsV1Size);
}

int mixprec_grad_scaler_options_init(mixprec_grad_scaler_options* out, size_t struct_size) {
  const char* call = "mixprec_grad_scaler_options_init";
  return guarded([&] {
    mixprec::c_api::require(out, call, "out");
    if (!mixprec::c_api::known_options_size(struct_size)) {
      mixprec::c_api::invalid(std::string(call) + ": struct_size " + std::to_string(struct_size) +
                              " is no version's size of mixprec_grad_scaler_options (" +
                              std::to_string(mixprec::c_api::kOptionsV1Size) + " for version 1, " +
                              std::to_string(sizeof(mixprec_grad_scaler_options)) +
                              " for this library's)");
    }
    mixprec::c_api::write_defaults(out, struct_size);
  });
}

void mixprec_grad_scaler_options_set_init_scale(mixprec_grad_scaler_options* o, double v) {
  if (o != nullptr) o->init_scale = v;
}
void mixprec_grad_scaler_options_set_growth_factor(mixprec_grad_scaler_options* o, double v) {
  if (o != nullptr) o->growth_factor = v;
}
void mixprec_grad_scaler_options_set_backoff_factor(mixprec_grad_scaler_options* o, double v) {
  if (o != nullptr) o->backoff_factor = v;
}
void mixprec_grad_scaler_options_set_growth_interval(mixprec_grad_scaler_options* o, int64_t v) {
  if (o != nullptr) o->growth_interval = v;
}
void mixprec_grad_scaler_options_set_enabled(mixprec_grad_scaler_options* o, int enabled) {
  if (o != nullptr) o->enabled = enabled;
}

}  // extern "C"
