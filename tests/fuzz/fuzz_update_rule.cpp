// libFuzzer target: the update rule (core::next_scale_state) against the independent reference
// model of tests/core/reference.h, over arbitrary policies and overflow sequences.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/reference.h"
#include "mixprec/core/scale_policy.h"

using mixprec::core::HysteresisRefill;
using mixprec::core::ScalePolicy;
using mixprec::core::ScaleState;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 12) return 0;
  ScalePolicy p;
  p.growth_factor = 1.0 + (data[0] % 64 + 1) / 16.0;  // (1, 5]
  p.backoff_factor = (data[1] % 255 + 1) / 256.0;     // (0, 1)
  p.growth_interval = 1 + data[2] % 50;
  p.hysteresis = 1 + data[3] % 5;
  p.hysteresis_refill = data[4] % 2 ? HysteresisRefill::kOnGrowth : HysteresisRefill::kOnCleanStep;
  p.min_scale = data[5] % 3 == 0 ? 0.0f : std::ldexp(1.0f, static_cast<int>(data[5] % 40) - 20);
  p.max_scale = data[6] % 3 == 0 ? 3.40282347e+38f : std::ldexp(1.0f, static_cast<int>(data[6] % 100));
  if (p.min_scale > p.max_scale) p.min_scale = 0.0f;
  float init;
  std::memcpy(&init, data + 7, 4);
  if (!std::isfinite(init) || init <= 0.0f) init = 65536.0f;
  ScaleState s{init, 0, p.hysteresis};
  mixprec::testing::ReferenceScaleModel ref{init, 0, p.hysteresis};
  for (std::size_t i = 11; i < size; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      const bool overflow = (data[i] >> bit) & 1;
      s = mixprec::core::next_scale_state(s, overflow ? 1.0f : 0.0f, p);
      ref.step(overflow, p);
      if (static_cast<double>(s.scale) != ref.scale || s.growth_tracker != ref.tracker ||
          s.hysteresis_tracker != ref.hysteresis_left || !(s.scale >= 0.0f)) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
