// The C ABI's boundary itself: every call refuses a NULL handle or out pointer with
// MIXPREC_ERROR_NULL_ARGUMENT and a message naming the call and the argument, leaving its
// out-parameters alone; the last error is per thread and survives successes; and 10^5 cycles of
// create / scale / free / destroy leak nothing (LeakSanitizer proves it under scripts/sanitize.sh,
// the resident size bounds it otherwise).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "c_api/c_api_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define MIXPREC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MIXPREC_TEST_ASAN 1
#endif
#endif

namespace mixprec::c_api_test {
namespace {

/// One call with a NULL argument: the call's name (as the message must give it), the word for
/// the argument, and the call itself.
struct NullCase {
  const char* call;
  const char* argument;
  std::function<int()> run;
};

TEST(NullArgumentTest, EveryCallRefusesNullNamingCallAndArgument) {
  CScaler scaler = make_c_scaler(nullptr);
  mixprec_grad_scaler* s = scaler.get();
  torch::Tensor param = torch::ones({2}, torch::requires_grad());
  param.mutable_grad() = torch::ones({2});
  torch::optim::SGD sgd({param}, torch::optim::SGDOptions(0.1));
  torch::optim::Optimizer* opt = &sgd;
  auto shared_holder = std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{param},
                                                           torch::optim::SGDOptions(0.1));
  std::shared_ptr<torch::optim::Optimizer> shared_ptr = shared_holder;
  void* sh = &shared_ptr;
  torch::Tensor t = torch::ones({2});
  void* grads[] = {&t};
  void* params[] = {&param};
  std::vector<char> buffer(64);

  // Out-parameters start as sentinels that no failing call may change.
  double d = -7.0;
  std::int64_t i = -7;
  int flag = -7;
  size_t size = 7;
  void* ptr = &d;
  mixprec_grad_scaler* made = reinterpret_cast<mixprec_grad_scaler*>(&d);
  mixprec_grad_scaler_telemetry tel{};
  tel.struct_size = sizeof tel;
  tel.iterations = -7;

  std::vector<NullCase> cases = {
      {"mixprec_grad_scaler_options_init", "out",
       [&] {
         return mixprec_grad_scaler_options_init(nullptr, sizeof(mixprec_grad_scaler_options));
       }},
      {"mixprec_grad_scaler_create", "out",
       [&] { return mixprec_grad_scaler_create(nullptr, nullptr); }},
      {"mixprec_grad_scaler_scale", "scaler",
       [&] { return mixprec_grad_scaler_scale(nullptr, &t, &ptr); }},
      {"mixprec_grad_scaler_scale", "tensor",
       [&] { return mixprec_grad_scaler_scale(s, nullptr, &ptr); }},
      {"mixprec_grad_scaler_scale", "out_tensor",
       [&] { return mixprec_grad_scaler_scale(s, &t, nullptr); }},
      {"mixprec_grad_scaler_unscale_", "scaler",
       [&] { return mixprec_grad_scaler_unscale_(nullptr, opt); }},
      {"mixprec_grad_scaler_unscale_", "optimizer",
       [&] { return mixprec_grad_scaler_unscale_(s, nullptr); }},
      {"mixprec_grad_scaler_unscale_shared_", "scaler",
       [&] { return mixprec_grad_scaler_unscale_shared_(nullptr, sh); }},
      {"mixprec_grad_scaler_unscale_shared_", "shared_optimizer",
       [&] { return mixprec_grad_scaler_unscale_shared_(s, nullptr); }},
      {"mixprec_grad_scaler_clip_grad_norm", "scaler",
       [&] { return mixprec_grad_scaler_clip_grad_norm(nullptr, opt, 1.0, 2.0, &ptr); }},
      {"mixprec_grad_scaler_clip_grad_norm", "optimizer",
       [&] { return mixprec_grad_scaler_clip_grad_norm(s, nullptr, 1.0, 2.0, &ptr); }},
      {"mixprec_grad_scaler_clip_grad_norm", "out_norm_tensor",
       [&] { return mixprec_grad_scaler_clip_grad_norm(s, opt, 1.0, 2.0, nullptr); }},
      {"mixprec_grad_scaler_clip_grad_norm_shared", "scaler",
       [&] { return mixprec_grad_scaler_clip_grad_norm_shared(nullptr, sh, 1.0, 2.0, &ptr); }},
      {"mixprec_grad_scaler_clip_grad_norm_shared", "shared_optimizer",
       [&] { return mixprec_grad_scaler_clip_grad_norm_shared(s, nullptr, 1.0, 2.0, &ptr); }},
      {"mixprec_grad_scaler_clip_grad_norm_shared", "out_norm_tensor",
       [&] { return mixprec_grad_scaler_clip_grad_norm_shared(s, sh, 1.0, 2.0, nullptr); }},
      {"mixprec_clip_grad_norm", "params",
       [&] { return mixprec_clip_grad_norm(nullptr, 1, 1.0, 2.0, 0, &ptr); }},
      {"mixprec_clip_grad_norm", "out_norm_tensor",
       [&] { return mixprec_clip_grad_norm(params, 1, 1.0, 2.0, 0, nullptr); }},
      {"mixprec_grad_scaler_step", "scaler",
       [&] { return mixprec_grad_scaler_step(nullptr, opt, &flag); }},
      {"mixprec_grad_scaler_step", "optimizer",
       [&] { return mixprec_grad_scaler_step(s, nullptr, &flag); }},
      {"mixprec_grad_scaler_step_shared", "scaler",
       [&] { return mixprec_grad_scaler_step_shared(nullptr, sh, &flag); }},
      {"mixprec_grad_scaler_step_shared", "shared_optimizer",
       [&] { return mixprec_grad_scaler_step_shared(s, nullptr, &flag); }},
      {"mixprec_grad_scaler_update", "scaler", [&] { return mixprec_grad_scaler_update(nullptr); }},
      {"mixprec_grad_scaler_update_to", "scaler",
       [&] { return mixprec_grad_scaler_update_to(nullptr, 2.0); }},
      {"mixprec_grad_scaler_update_to_tensor", "scaler",
       [&] { return mixprec_grad_scaler_update_to_tensor(nullptr, &t); }},
      {"mixprec_grad_scaler_update_to_tensor", "new_scale",
       [&] { return mixprec_grad_scaler_update_to_tensor(s, nullptr); }},
      {"mixprec_grad_scaler_get_scale", "scaler",
       [&] { return mixprec_grad_scaler_get_scale(nullptr, &d); }},
      {"mixprec_grad_scaler_get_scale", "out",
       [&] { return mixprec_grad_scaler_get_scale(s, nullptr); }},
      {"mixprec_grad_scaler_get_scale_async", "scaler",
       [&] { return mixprec_grad_scaler_get_scale_async(nullptr, &ptr); }},
      {"mixprec_grad_scaler_get_scale_async", "out_tensor",
       [&] { return mixprec_grad_scaler_get_scale_async(s, nullptr); }},
      {"mixprec_grad_scaler_get_growth_tracker", "scaler",
       [&] { return mixprec_grad_scaler_get_growth_tracker(nullptr, &i); }},
      {"mixprec_grad_scaler_get_growth_tracker", "out",
       [&] { return mixprec_grad_scaler_get_growth_tracker(s, nullptr); }},
      {"mixprec_grad_scaler_is_enabled", "scaler",
       [&] { return mixprec_grad_scaler_is_enabled(nullptr, &flag); }},
      {"mixprec_grad_scaler_is_enabled", "out",
       [&] { return mixprec_grad_scaler_is_enabled(s, nullptr); }},
      {"mixprec_grad_scaler_get_growth_factor", "scaler",
       [&] { return mixprec_grad_scaler_get_growth_factor(nullptr, &d); }},
      {"mixprec_grad_scaler_get_growth_factor", "out",
       [&] { return mixprec_grad_scaler_get_growth_factor(s, nullptr); }},
      {"mixprec_grad_scaler_set_growth_factor", "scaler",
       [&] { return mixprec_grad_scaler_set_growth_factor(nullptr, 3.0); }},
      {"mixprec_grad_scaler_get_backoff_factor", "scaler",
       [&] { return mixprec_grad_scaler_get_backoff_factor(nullptr, &d); }},
      {"mixprec_grad_scaler_get_backoff_factor", "out",
       [&] { return mixprec_grad_scaler_get_backoff_factor(s, nullptr); }},
      {"mixprec_grad_scaler_set_backoff_factor", "scaler",
       [&] { return mixprec_grad_scaler_set_backoff_factor(nullptr, 0.25); }},
      {"mixprec_grad_scaler_get_growth_interval", "scaler",
       [&] { return mixprec_grad_scaler_get_growth_interval(nullptr, &i); }},
      {"mixprec_grad_scaler_get_growth_interval", "out",
       [&] { return mixprec_grad_scaler_get_growth_interval(s, nullptr); }},
      {"mixprec_grad_scaler_set_growth_interval", "scaler",
       [&] { return mixprec_grad_scaler_set_growth_interval(nullptr, 5); }},
      {"mixprec_grad_scaler_last_step_applied", "scaler",
       [&] { return mixprec_grad_scaler_last_step_applied(nullptr, opt, &flag); }},
      {"mixprec_grad_scaler_last_step_applied", "optimizer",
       [&] { return mixprec_grad_scaler_last_step_applied(s, nullptr, &flag); }},
      {"mixprec_grad_scaler_last_step_applied", "out",
       [&] { return mixprec_grad_scaler_last_step_applied(s, opt, nullptr); }},
      {"mixprec_grad_scaler_last_step_applied_shared", "scaler",
       [&] { return mixprec_grad_scaler_last_step_applied_shared(nullptr, sh, &flag); }},
      {"mixprec_grad_scaler_last_step_applied_shared", "shared_optimizer",
       [&] { return mixprec_grad_scaler_last_step_applied_shared(s, nullptr, &flag); }},
      {"mixprec_grad_scaler_last_step_applied_shared", "out",
       [&] { return mixprec_grad_scaler_last_step_applied_shared(s, sh, nullptr); }},
      {"mixprec_grad_scaler_last_step_found_inf", "scaler",
       [&] { return mixprec_grad_scaler_last_step_found_inf(nullptr, opt, &ptr); }},
      {"mixprec_grad_scaler_last_step_found_inf", "optimizer",
       [&] { return mixprec_grad_scaler_last_step_found_inf(s, nullptr, &ptr); }},
      {"mixprec_grad_scaler_last_step_found_inf", "out_tensor",
       [&] { return mixprec_grad_scaler_last_step_found_inf(s, opt, nullptr); }},
      {"mixprec_grad_scaler_last_step_found_inf_shared", "scaler",
       [&] { return mixprec_grad_scaler_last_step_found_inf_shared(nullptr, sh, &ptr); }},
      {"mixprec_grad_scaler_last_step_found_inf_shared", "shared_optimizer",
       [&] { return mixprec_grad_scaler_last_step_found_inf_shared(s, nullptr, &ptr); }},
      {"mixprec_grad_scaler_last_step_found_inf_shared", "out_tensor",
       [&] { return mixprec_grad_scaler_last_step_found_inf_shared(s, sh, nullptr); }},
      {"mixprec_grad_scaler_get_telemetry", "scaler",
       [&] { return mixprec_grad_scaler_get_telemetry(nullptr, &tel); }},
      {"mixprec_grad_scaler_get_telemetry", "out",
       [&] { return mixprec_grad_scaler_get_telemetry(s, nullptr); }},
      {"mixprec_grad_scaler_unscale_grads_", "scaler",
       [&] { return mixprec_grad_scaler_unscale_grads_(nullptr, grads, 1, &ptr); }},
      {"mixprec_grad_scaler_unscale_grads_", "grads",
       [&] { return mixprec_grad_scaler_unscale_grads_(s, nullptr, 1, &ptr); }},
      {"mixprec_grad_scaler_unscale_grads_", "out_found_inf",
       [&] { return mixprec_grad_scaler_unscale_grads_(s, grads, 1, nullptr); }},
      {"mixprec_grad_scaler_state_dict", "scaler",
       [&] {
         return mixprec_grad_scaler_state_dict(nullptr, buffer.data(), buffer.size(), &size);
       }},
      {"mixprec_grad_scaler_state_dict", "out_size",
       [&] { return mixprec_grad_scaler_state_dict(s, buffer.data(), buffer.size(), nullptr); }},
      {"mixprec_grad_scaler_load_state_dict", "scaler",
       [&] { return mixprec_grad_scaler_load_state_dict(nullptr, buffer.data(), buffer.size()); }},
      {"mixprec_grad_scaler_load_state_dict", "data",
       [&] { return mixprec_grad_scaler_load_state_dict(s, nullptr, 10); }},
      {"mixprec_optim_sgd_create", "params",
       [&] { return mixprec_optim_sgd_create(nullptr, 1, 0.1, 0, 0, 0, 0, &ptr); }},
      {"mixprec_optim_sgd_create", "out_optimizer",
       [&] { return mixprec_optim_sgd_create(params, 1, 0.1, 0, 0, 0, 0, nullptr); }},
      {"mixprec_optim_sgd_create_shared", "params",
       [&] { return mixprec_optim_sgd_create_shared(nullptr, 1, 0.1, 0, 0, 0, 0, &ptr); }},
      {"mixprec_optim_sgd_create_shared", "out_shared_optimizer",
       [&] { return mixprec_optim_sgd_create_shared(params, 1, 0.1, 0, 0, 0, 0, nullptr); }},
      {"mixprec_optim_adam_create", "params",
       [&] { return mixprec_optim_adam_create(nullptr, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, &ptr); }},
      {"mixprec_optim_adam_create", "out_optimizer",
       [&] { return mixprec_optim_adam_create(params, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, nullptr); }},
      {"mixprec_optim_adam_create_shared", "params",
       [&] {
         return mixprec_optim_adam_create_shared(nullptr, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, &ptr);
       }},
      {"mixprec_optim_adam_create_shared", "out_shared_optimizer",
       [&] {
         return mixprec_optim_adam_create_shared(params, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, nullptr);
       }},
      {"mixprec_optim_adamw_create", "params",
       [&] { return mixprec_optim_adamw_create(nullptr, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, &ptr); }},
      {"mixprec_optim_adamw_create", "out_optimizer",
       [&] { return mixprec_optim_adamw_create(params, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, nullptr); }},
      {"mixprec_optim_adamw_create_shared", "params",
       [&] {
         return mixprec_optim_adamw_create_shared(nullptr, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, &ptr);
       }},
      {"mixprec_optim_adamw_create_shared", "out_shared_optimizer",
       [&] {
         return mixprec_optim_adamw_create_shared(params, 1, 0.1, 0.9, 0.99, 1e-8, 0, 0, nullptr);
       }},
      {"mixprec_optimizer_get_lr", "optimizer",
       [&] { return mixprec_optimizer_get_lr(nullptr, &d); }},
      {"mixprec_optimizer_get_lr", "out", [&] { return mixprec_optimizer_get_lr(opt, nullptr); }},
      {"mixprec_optimizer_get_lr_shared", "shared_optimizer",
       [&] { return mixprec_optimizer_get_lr_shared(nullptr, &d); }},
      {"mixprec_optimizer_get_lr_shared", "out",
       [&] { return mixprec_optimizer_get_lr_shared(sh, nullptr); }},
      {"mixprec_optimizer_set_lr", "optimizer",
       [&] { return mixprec_optimizer_set_lr(nullptr, 0.5); }},
      {"mixprec_optimizer_set_lr_shared", "shared_optimizer",
       [&] { return mixprec_optimizer_set_lr_shared(nullptr, 0.5); }},
      {"mixprec_optimizer_state_dict", "optimizer",
       [&] { return mixprec_optimizer_state_dict(nullptr, &ptr, &size); }},
      {"mixprec_optimizer_state_dict", "out_bytes",
       [&] { return mixprec_optimizer_state_dict(opt, nullptr, &size); }},
      {"mixprec_optimizer_state_dict", "out_size",
       [&] { return mixprec_optimizer_state_dict(opt, &ptr, nullptr); }},
      {"mixprec_optimizer_state_dict_shared", "shared_optimizer",
       [&] { return mixprec_optimizer_state_dict_shared(nullptr, &ptr, &size); }},
      {"mixprec_optimizer_state_dict_shared", "out_bytes",
       [&] { return mixprec_optimizer_state_dict_shared(sh, nullptr, &size); }},
      {"mixprec_optimizer_state_dict_shared", "out_size",
       [&] { return mixprec_optimizer_state_dict_shared(sh, &ptr, nullptr); }},
      {"mixprec_optimizer_load_state_dict", "optimizer",
       [&] { return mixprec_optimizer_load_state_dict(nullptr, buffer.data(), buffer.size()); }},
      {"mixprec_optimizer_load_state_dict", "data",
       [&] { return mixprec_optimizer_load_state_dict(opt, nullptr, 10); }},
      {"mixprec_optimizer_load_state_dict_shared", "shared_optimizer",
       [&] {
         return mixprec_optimizer_load_state_dict_shared(nullptr, buffer.data(), buffer.size());
       }},
      {"mixprec_optimizer_load_state_dict_shared", "data",
       [&] { return mixprec_optimizer_load_state_dict_shared(sh, nullptr, 10); }},
  };
  // Files and streams (none is opened or written: the NULL is refused first).
  const mixprec_write_fn write = [](void*, const void*, size_t) { return 0; };
  const mixprec_read_fn read = [](void*, uint64_t, void*, size_t) { return 0; };
  cases.push_back({"mixprec_grad_scaler_save", "scaler", [&] { return mixprec_grad_scaler_save(nullptr, "x"); }});
  cases.push_back({"mixprec_grad_scaler_save", "path", [&] { return mixprec_grad_scaler_save(s, nullptr); }});
  cases.push_back({"mixprec_grad_scaler_load", "scaler", [&] { return mixprec_grad_scaler_load(nullptr, "x"); }});
  cases.push_back({"mixprec_grad_scaler_load", "path", [&] { return mixprec_grad_scaler_load(s, nullptr); }});
  cases.push_back({"mixprec_grad_scaler_save_to", "scaler",
                   [&] { return mixprec_grad_scaler_save_to(nullptr, write, nullptr); }});
  cases.push_back({"mixprec_grad_scaler_save_to", "write",
                   [&] { return mixprec_grad_scaler_save_to(s, nullptr, nullptr); }});
  cases.push_back({"mixprec_grad_scaler_load_from", "scaler",
                   [&] { return mixprec_grad_scaler_load_from(nullptr, read, nullptr, 10); }});
  cases.push_back({"mixprec_grad_scaler_load_from", "read",
                   [&] { return mixprec_grad_scaler_load_from(s, nullptr, nullptr, 10); }});
  struct OptimizerCalls {
    void* handle;
    const char* argument;
    const char *save, *load, *save_to, *load_from;
    int (*save_fn)(void*, const char*);
    int (*load_fn)(void*, const char*);
    int (*save_to_fn)(void*, mixprec_write_fn, void*);
    int (*load_from_fn)(void*, mixprec_read_fn, void*, uint64_t);
  };
  for (const OptimizerCalls& k :
       {OptimizerCalls{opt, "optimizer", "mixprec_optimizer_save", "mixprec_optimizer_load",
                       "mixprec_optimizer_save_to", "mixprec_optimizer_load_from",
                       mixprec_optimizer_save, mixprec_optimizer_load, mixprec_optimizer_save_to,
                       mixprec_optimizer_load_from},
        OptimizerCalls{sh, "shared_optimizer", "mixprec_optimizer_save_shared",
                       "mixprec_optimizer_load_shared", "mixprec_optimizer_save_to_shared",
                       "mixprec_optimizer_load_from_shared", mixprec_optimizer_save_shared,
                       mixprec_optimizer_load_shared, mixprec_optimizer_save_to_shared,
                       mixprec_optimizer_load_from_shared}}) {
    void* o = k.handle;
    cases.push_back({k.save, k.argument, [=] { return k.save_fn(nullptr, "x"); }});
    cases.push_back({k.save, "path", [=] { return k.save_fn(o, nullptr); }});
    cases.push_back({k.load, k.argument, [=] { return k.load_fn(nullptr, "x"); }});
    cases.push_back({k.load, "path", [=] { return k.load_fn(o, nullptr); }});
    cases.push_back({k.save_to, k.argument, [=] { return k.save_to_fn(nullptr, write, nullptr); }});
    cases.push_back({k.save_to, "write", [=] { return k.save_to_fn(o, nullptr, nullptr); }});
    cases.push_back({k.load_from, k.argument, [=] { return k.load_from_fn(nullptr, read, nullptr, 10); }});
    cases.push_back({k.load_from, "read", [=] { return k.load_from_fn(o, nullptr, nullptr, 10); }});
  }
  for (const NullCase& c : cases) {
    SCOPED_TRACE(std::string(c.call) + ", NULL " + c.argument);
    const int rc = call_noexcept([&]() noexcept { return c.run(); });
    EXPECT_EQ(rc, MIXPREC_ERROR_NULL_ARGUMENT);
    const std::string message = mixprec_last_error();
    EXPECT_EQ(message, std::string(c.call) + ": " + c.argument + " is NULL");
  }
  EXPECT_EQ(d, -7.0);
  EXPECT_EQ(i, -7);
  EXPECT_EQ(flag, -7);
  EXPECT_EQ(size, 7u);
  EXPECT_EQ(ptr, static_cast<void*>(&d));
  EXPECT_EQ(made, reinterpret_cast<mixprec_grad_scaler*>(&d));
  EXPECT_EQ(tel.iterations, -7);
  // Every int-returning call of c_api.h that takes a pointer has its cases here.
  std::set<std::string> covered;
  for (const NullCase& c : cases) covered.insert(c.call);
  std::set<std::string> declared;
  std::ifstream header(MIXPREC_C_API_HEADER);
  const std::regex declaration("^MIXPREC_C_EXPORT int (mixprec_[a-z0-9_]+)\\(");
  for (std::string line; std::getline(header, line);) {
    std::smatch m;
    if (std::regex_search(line, m, declaration) && m[1].str() != "mixprec_abi_version") {
      declared.insert(m[1].str());
    }
  }
  EXPECT_GT(declared.size(), 0u) << "no declarations read from " << MIXPREC_C_API_HEADER;
  EXPECT_EQ(covered, declared);
}

// A list entry may be NULL in unscale_grads_ (skipped), not in an optimizer's params.
TEST(NullArgumentTest, ANullParamEntryIsRefusedNamingItsIndex) {
  torch::Tensor p = torch::ones({2}, torch::requires_grad());
  void* params[] = {&p, nullptr};
  void* out = &p;
  const int rc = call_noexcept(
      [&]() noexcept { return mixprec_optim_sgd_create(params, 2, 0.1, 0, 0, 0, 0, &out); });
  EXPECT_EQ(rc, MIXPREC_ERROR_NULL_ARGUMENT);
  EXPECT_NE(std::string(mixprec_last_error()).find("params[1]"), std::string::npos)
      << mixprec_last_error();
  EXPECT_EQ(out, static_cast<void*>(&p));
}

// ---- the last error -----------------------------------------------------------------------------

TEST(LastErrorTest, IsPerThread) {
  double d = 0.0;
  ASSERT_EQ(mixprec_grad_scaler_get_scale(nullptr, &d), MIXPREC_ERROR_NULL_ARGUMENT);
  const std::string mine = mixprec_last_error();
  std::string before_in_thread, in_thread;
  std::thread other([&] {
    before_in_thread = mixprec_last_error();
    mixprec_grad_scaler_update(nullptr);
    in_thread = mixprec_last_error();
  });
  other.join();
  EXPECT_EQ(before_in_thread, "");  // a new thread starts without an error
  EXPECT_NE(in_thread.find("mixprec_grad_scaler_update:"), std::string::npos) << in_thread;
  EXPECT_NE(in_thread, mine);
  EXPECT_EQ(std::string(mixprec_last_error()), mine);
}

TEST(LastErrorTest, SurvivesSuccessesUntilTheNextFailure) {
  CScaler s = make_c_scaler(nullptr);
  double d = 0.0;
  ASSERT_NE(mixprec_grad_scaler_get_scale(nullptr, &d), MIXPREC_OK);
  const std::string first = mixprec_last_error();
  torch::Tensor t = torch::ones({2});
  OwnedTensor scaled;
  MIXPREC_C_OK(mixprec_grad_scaler_scale(s.get(), &t, scaled.out()));
  MIXPREC_C_OK(mixprec_grad_scaler_get_scale(s.get(), &d));
  EXPECT_EQ(std::string(mixprec_last_error()), first);
  ASSERT_NE(mixprec_grad_scaler_update(nullptr), MIXPREC_OK);
  EXPECT_NE(std::string(mixprec_last_error()), first);
}

// ---- no leaks -----------------------------------------------------------------------------------

/// The resident set size in bytes (Linux).
std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

// 10^5 cycles as a binding's training script would run them, over and over: create, scale a
// tensor, free the result, destroy. Under LeakSanitizer (scripts/sanitize.sh) any leaked handle
// or scaler fails the run; without it, a leak of even the smallest of them (the tensor handle,
// some 400 bytes) would grow the resident size by tens of MB.
TEST(LeakTest, CreateScaleFreeDestroyCyclesLeakNothing) {
  constexpr int kCycles = 100000;
  torch::Tensor t = torch::ones({1});
  auto cycle = [&] {
    mixprec_grad_scaler* s = nullptr;
    MIXPREC_C_OK(mixprec_grad_scaler_create(nullptr, &s));
    void* scaled = nullptr;
    MIXPREC_C_OK(mixprec_grad_scaler_scale(s, &t, &scaled));
    mixprec_tensor_free(scaled);
    mixprec_grad_scaler_destroy(s);
  };
  for (int k = 0; k < 1000; ++k) cycle();  // allocator pools warmed up
  const std::int64_t before = resident_bytes();
  for (int k = 0; k < kCycles; ++k) cycle();
  const std::int64_t growth = resident_bytes() - before;
  RecordProperty("resident_growth_bytes", std::to_string(growth));
#if !defined(MIXPREC_TEST_ASAN)  // ASan's quarantine holds freed memory: LSan decides there
  EXPECT_LT(growth, 16 << 20) << "resident size grew by " << growth << " bytes";
#else
  (void)growth;
#endif
}

}  // namespace
}  // namespace mixprec::c_api_test
