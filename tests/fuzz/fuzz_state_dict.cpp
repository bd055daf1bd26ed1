// libFuzzer target: GradScaler::load_state_dict on arbitrary dicts built from the input (keys from
// the real key set plus junk, values of every type and range). It must load or throw an error,
// never crash, and when it throws the scaler must be exactly as before.
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "mixprec/mixprec.h"

namespace {

const char* const kKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                             "_growth_tracker", "mixprec_format", "hysteresis",
                             "hysteresis_refill", "min_scale", "max_scale", "_counters",
                             "_history", "junk"};

c10::IValue value_from(const std::uint8_t* d, std::size_t n) {
  if (n == 0) return c10::IValue();
  double x = 0;
  std::int64_t k = 0;
  if (n >= 9) {
    std::memcpy(&x, d + 1, 8);
    std::memcpy(&k, d + 1, 8);
  }
  switch (d[0] % 8) {
    case 0: return x;
    case 1: return k;
    case 2: return static_cast<std::int64_t>(d[0] % 7) - 2;
    case 3: return std::string(n > 1 ? "on_clean_step" : "on_growth");
    case 4: return c10::List<std::int64_t>(std::vector<std::int64_t>(d[0] % 10, k));
    case 5: return c10::List<double>(std::vector<double>(3 * (d[0] % 4), x));
    case 6: return static_cast<double>(d[0]) / 16.0;
    default: return c10::IValue(true);
  }
}

std::string fingerprint(const mixprec::GradScaler& s) {
  std::string out = std::to_string(s.get_scale()) + "/" + std::to_string(s.get_growth_factor()) +
                    "/" + std::to_string(s.get_backoff_factor()) + "/" +
                    std::to_string(s.get_growth_interval()) + "/" +
                    std::to_string(s.get_growth_tracker());
  const auto t = s.telemetry();
  out += "/" + std::to_string(t.iterations) + "/" + std::to_string(t.hysteresis_tracker);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(8.0).hysteresis(2));
  static bool initialised = [] {
    scaler.scale(torch::ones({1}));
    return true;
  }();
  (void)initialised;
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  std::size_t pos = 0;
  while (pos + 2 <= size) {
    const std::string key = kKeys[data[pos] % (sizeof(kKeys) / sizeof(kKeys[0]))];
    const std::size_t len = std::min<std::size_t>(data[pos + 1] % 12, size - pos - 2);
    dict.insert_or_assign(key, value_from(data + pos + 2, len));
    pos += 2 + len;
  }
  const std::string before = fingerprint(scaler);
  try {
    scaler.load_state_dict(dict);
  } catch (const std::exception&) {  // c10::Error, whichever library's type_info it carries
    if (fingerprint(scaler) != before) __builtin_trap();  // a refused dict changed the scaler
  }
  return 0;
}
