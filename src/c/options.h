// The C ABI's versioned structs (include/mixprec/c_api.h): the frozen sizes of their versions, and
// the options struct read into GradScalerOptions. Fields are only ever appended, so a version's
// size is where its last field ends; a caller's struct_size names the version it was built with.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/c_api.h"
#include "mixprec/grad_scaler_options.h"

namespace mixprec::c_api {

/// mixprec_grad_scaler_options version 1 (PyTorch's five fields to history_size): what
/// mixprec_grad_scaler_options_default writes, in every later library too.
inline constexpr std::size_t kOptionsV1Size =
    offsetof(mixprec_grad_scaler_options, history_size) + sizeof(std::int64_t);
/// mixprec_grad_scaler_telemetry version 1 (to hysteresis_tracker).
inline constexpr std::size_t kTelemetryV1Size =
    offsetof(mixprec_grad_scaler_telemetry, hysteresis_tracker) + sizeof(std::int64_t);

/// Whether `size` is the size of a version of the options struct this library knows.
bool known_options_size(std::size_t size);

/// The options a caller's struct asks for (fields past its struct_size keep their defaults);
/// throws a Failure (MIXPREC_ERROR_INVALID_ARGUMENT) for an unknown struct_size or enum value.
GradScalerOptions to_options(const mixprec_grad_scaler_options& o);

}  // namespace mixprec::c_api
