// GradScaler checkpoints and printing: PyTorch's five state_dict keys, mixprec's versioned extra
// state when options beyond PyTorch are in use, and refusal of malformed dicts without changes.
#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/loss_scaler.h"
#include "mixprec/core/scale_policy.h"
#include "mixprec/grad_scaler.h"
#include "torch/views.h"

namespace mixprec {
namespace {

constexpr std::int64_t kFormat = 1;  // the "mixprec_format" this code writes and reads

const char* refill_name(core::HysteresisRefill r) {
  return r == core::HysteresisRefill::kOnGrowth ? "on_growth" : "on_clean_step";
}

// Typed reads of one key, each naming the key in its error.
class DictReader {
 public:
  explicit DictReader(const c10::impl::GenericDict& dict) : dict_(dict) {}

  bool has(const char* key) const { return dict_.find(c10::IValue(std::string(key))) != dict_.end(); }

  const c10::IValue& get(const char* key) const {
    auto it = dict_.find(c10::IValue(std::string(key)));
    TORCH_CHECK(it != dict_.end(), "GradScaler.load_state_dict: missing key \"", key, "\"");
    return it->value();
  }
  double number(const char* key) const {
    const c10::IValue& v = get(key);
    TORCH_CHECK(v.isDouble() || v.isInt(), "GradScaler.load_state_dict: \"", key,
                "\" must be a float, got ", v.tagKind());
    return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
  }
  std::int64_t integer(const char* key) const {
    const c10::IValue& v = get(key);
    TORCH_CHECK(v.isInt(), "GradScaler.load_state_dict: \"", key, "\" must be an int, got ",
                v.tagKind());
    return v.toInt();
  }
  std::string string(const char* key) const {
    const c10::IValue& v = get(key);
    TORCH_CHECK(v.isString(), "GradScaler.load_state_dict: \"", key, "\" must be a str, got ",
                v.tagKind());
    return v.toStringRef();
  }
  std::vector<std::int64_t> int_list(const char* key, std::size_t size) const {
    const c10::IValue& v = get(key);
    TORCH_CHECK(v.isIntList() && v.toIntList().size() == size, "GradScaler.load_state_dict: \"",
                key, "\" must be a list of ", size, " ints");
    return v.toIntVector();
  }
  std::vector<double> double_list(const char* key) const {
    const c10::IValue& v = get(key);
    TORCH_CHECK(v.isDoubleList(), "GradScaler.load_state_dict: \"", key,
                "\" must be a list of floats, got ", v.tagKind());
    return v.toDoubleVector();
  }

 private:
  const c10::impl::GenericDict& dict_;
};

}  // namespace

c10::impl::GenericDict GradScaler::state_dict() const {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  if (!options_.enabled()) return dict;
  dict.insert("scale", get_scale());
  dict.insert("growth_factor", options_.growth_factor());
  dict.insert("backoff_factor", options_.backoff_factor());
  dict.insert("growth_interval", options_.growth_interval());
  dict.insert("_growth_tracker", get_growth_tracker());
  if (!options_.uses_extensions()) return dict;  // exactly PyTorch's dict
  const std::vector<std::int64_t> counters =
      counters_.defined() ? detail::to_host_vector<std::int64_t>(counters_) : init_counters_;
  const std::vector<double> history =
      history_.defined() ? detail::to_host_vector<double>(history_) : init_history_;
  dict.insert("mixprec_format", kFormat);
  dict.insert("hysteresis", static_cast<std::int64_t>(options_.hysteresis()));
  dict.insert("hysteresis_refill", std::string(refill_name(options_.hysteresis_refill())));
  dict.insert("min_scale", options_.min_scale());
  dict.insert("max_scale", options_.max_scale());
  dict.insert("_counters", c10::List<std::int64_t>(counters));
  dict.insert("_history", c10::List<double>(history));
  return dict;
}

void GradScaler::load_state_dict(const c10::impl::GenericDict& state_dict) {
  plan_load_state_dict(state_dict)();
}

std::function<void()> GradScaler::plan_load_state_dict(const c10::impl::GenericDict& state_dict) {
  if (!options_.enabled()) return [] {};
  TORCH_CHECK(!state_dict.empty(),
              "The source state dict is empty, possibly because it was saved from a disabled "
              "instance of GradScaler.");
  // Read and check everything before changing anything, so a bad dict leaves the scaler as it was.
  const DictReader in(state_dict);
  const double scale = in.number("scale");
  // The scale is kept as a float32: it must stay finite and positive there too.
  TORCH_CHECK(std::isfinite(scale) && scale > 0.0 && std::isfinite(static_cast<float>(scale)) &&
                  static_cast<float>(scale) > 0.0f,
              "GradScaler.load_state_dict: \"scale\" must be finite and > 0 as a float32, got ",
              scale);
  const double growth_factor = in.number("growth_factor");
  const double backoff_factor = in.number("backoff_factor");
  const std::int64_t growth_interval = in.integer("growth_interval");
  const std::int64_t growth_tracker = in.integer("_growth_tracker");
  TORCH_CHECK(growth_tracker >= 0 && growth_tracker <= INT32_MAX,
              "GradScaler.load_state_dict: \"_growth_tracker\" must be in [0, 2^31), got ",
              growth_tracker);

  GradScalerOptions options = options_;
  options.growth_factor(growth_factor).backoff_factor(backoff_factor).growth_interval(growth_interval);
  // A dict without mixprec's keys (e.g. from Python) keeps this scaler's own extra options and
  // starts their state afresh.
  std::vector<std::int64_t> counters(core::kNumCounters);
  core::init_counters(counters.data(), options.hysteresis());
  std::vector<double> history(static_cast<std::size_t>(options.history_size()) * 3, 0.0);
  if (in.has("mixprec_format")) {
    const std::int64_t format = in.integer("mixprec_format");
    TORCH_CHECK(format == kFormat, "GradScaler.load_state_dict: unknown \"mixprec_format\" ",
                format, "; this mixprec reads format ", kFormat, ". Was it saved by a newer mixprec?");
    const std::int64_t hysteresis = in.integer("hysteresis");
    TORCH_CHECK(hysteresis >= 1 && hysteresis <= INT32_MAX,
                "GradScaler.load_state_dict: \"hysteresis\" must be >= 1, got ", hysteresis);
    const std::string refill = in.string("hysteresis_refill");
    TORCH_CHECK(refill == "on_growth" || refill == "on_clean_step",
                "GradScaler.load_state_dict: \"hysteresis_refill\" must be \"on_growth\" or ",
                "\"on_clean_step\", got \"", refill, "\"");
    const double min_scale = in.number("min_scale");
    const double max_scale = in.number("max_scale");
    TORCH_CHECK(std::isfinite(min_scale) && min_scale >= 0.0 && max_scale > 0.0 &&
                    min_scale <= max_scale,
                "GradScaler.load_state_dict: need 0 <= \"min_scale\" <= \"max_scale\", got ",
                min_scale, " and ", max_scale);
    counters = in.int_list("_counters", core::kNumCounters);
    TORCH_CHECK(counters[core::kCounterHysteresis] >= 0 && counters[core::kCounterIterations] >= 0,
                "GradScaler.load_state_dict: \"_counters\" holds a negative tracker or count");
    history = in.double_list("_history");
    TORCH_CHECK(history.size() % 3 == 0,
                "GradScaler.load_state_dict: \"_history\" must hold rows of 3 floats, got ",
                history.size(), " values");
    options.hysteresis(static_cast<std::int32_t>(hysteresis))
        .hysteresis_refill(refill == "on_growth" ? core::HysteresisRefill::kOnGrowth
                                                 : core::HysteresisRefill::kOnCleanStep)
        .min_scale(min_scale)
        .max_scale(max_scale)
        .history_size(static_cast<std::int64_t>(history.size() / 3));
  }
  // The constructor's rules hold for a loaded state too (growth_factor > 1, backoff_factor in
  // (0, 1), growth_interval >= 1, ...): a file cannot make a scaler no constructor would.
  try {
    core::validate_scaler_options("GradScaler.load_state_dict", scale, options.policy());
  } catch (const core::Error& e) {
    TORCH_CHECK(false, e.what());
  }

  // Build the new device state first: if anything throws here, nothing was changed yet.
  at::Tensor new_counters, new_history;
  if (scale_.defined()) {
    const c10::Device device = scale_.device();
    new_counters = at::tensor(counters, at::kLong).to(device);
    new_history = at::tensor(history, at::kDouble).reshape({options.history_size(), 3}).to(device);
  }
  return [this, options = std::move(options), scale, growth_tracker,
          counters = std::move(counters), history = std::move(history),
          new_counters = std::move(new_counters), new_history = std::move(new_history)]() mutable {
    options_ = std::move(options);
    init_scale_ = scale;
    init_growth_tracker_ = growth_tracker;
    init_counters_ = std::move(counters);
    init_history_ = std::move(history);
    if (scale_.defined()) {
      // Values checked above, so these in-place fills cannot fail.
      scale_.fill_(static_cast<float>(scale));
      growth_tracker_.fill_(static_cast<std::int32_t>(growth_tracker));
      counters_ = std::move(new_counters);
      history_ = std::move(new_history);
    }
  };
}

std::ostream& operator<<(std::ostream& out, const GradScaler& scaler) {
  return out << "GradScaler(scale=" << scaler.get_scale()
             << ", growth_factor=" << scaler.get_growth_factor()
             << ", backoff_factor=" << scaler.get_backoff_factor()
             << ", growth_interval=" << scaler.get_growth_interval()
             << ", enabled=" << (scaler.is_enabled() ? "true" : "false") << ")";
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  for (const auto& entry : state_dict()) archive.write(entry.key().toStringRef(), entry.value());
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (const std::string& key : archive.keys()) {
    c10::IValue value;
    archive.read(key, value);
    dict.insert(key, std::move(value));
  }
  load_state_dict(dict);
}

torch::serialize::OutputArchive& operator<<(torch::serialize::OutputArchive& archive,
                                            const GradScaler& scaler) {
  scaler.save(archive);
  return archive;
}

torch::serialize::InputArchive& operator>>(torch::serialize::InputArchive& archive,
                                           GradScaler& scaler) {
  scaler.load(archive);
  return archive;
}

}  // namespace mixprec
