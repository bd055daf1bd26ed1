// The C ABI's files and streams (include/mixprec/c_api.h): a scaler's and an optimizer's state
// saved to a path (durably, as save_checkpoint saves) and through a binding's writer, loaded from
// a path and through its reader; the bytes are torch.save's, the same as the state_dict calls';
// a writer or reader that fails makes the call fail, saying so, and changes nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "c_api/c_api_test_util.h"
#include "mixprec/checkpoint.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/serialize.h"

namespace mixprec::c_api_test {
namespace {

// A binding's stream: a growing buffer, read at offsets; `fail_at` makes a call fail.
struct Stream {
  std::vector<char> bytes;
  int calls = 0, fail_at = -1;
  static int write(void* context, const void* data, size_t size) {
    auto* s = static_cast<Stream*>(context);
    if (s->calls++ == s->fail_at) return 5;
    s->bytes.insert(s->bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return 0;
  }
  static int read(void* context, uint64_t offset, void* buffer, size_t size) {
    auto* s = static_cast<Stream*>(context);
    if (s->calls++ == s->fail_at || offset + size > s->bytes.size()) return 7;
    std::memcpy(buffer, s->bytes.data() + offset, size);
    return 0;
  }
};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

std::vector<char> scaler_bytes(mixprec_grad_scaler* s) {
  size_t size = 0;
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(s, nullptr, 0, &size));
  std::vector<char> out(size);
  MIXPREC_C_OK(mixprec_grad_scaler_state_dict(s, out.data(), size, &size));
  return out;
}

TEST(FilesTest, AScalerSavedToAPathOrAStreamLoadsBack) {
  mixprec_grad_scaler_options options;
  mixprec_grad_scaler_options_default(&options);
  mixprec_grad_scaler_options_set_init_scale(&options, 512.0);
  mixprec_grad_scaler_options_set_growth_interval(&options, 7);
  CScaler saved = make_c_scaler(&options);
  const std::string path = ::testing::TempDir() + "mixprec_c_files_scaler.pt";
  MIXPREC_C_OK(mixprec_grad_scaler_save(saved.get(), path.c_str()));
  Stream stream;
  MIXPREC_C_OK(mixprec_grad_scaler_save_to(saved.get(), &Stream::write, &stream));
  // Both are torch.save's bytes of the state_dict, as the state_dict call writes them.
  const std::vector<char> want = scaler_bytes(saved.get());
  EXPECT_TRUE(file_bytes(path) == want);
  EXPECT_TRUE(stream.bytes == want);
  for (const bool from_path : {true, false}) {
    CScaler loaded = make_c_scaler(nullptr);
    stream.calls = 0;
    MIXPREC_C_OK(from_path ? mixprec_grad_scaler_load(loaded.get(), path.c_str())
                           : mixprec_grad_scaler_load_from(loaded.get(), &Stream::read, &stream,
                                                           stream.bytes.size()));
    double scale = 0;
    MIXPREC_C_OK(mixprec_grad_scaler_get_scale(loaded.get(), &scale));
    EXPECT_EQ(scale, 512.0);
    EXPECT_TRUE(scaler_bytes(loaded.get()) == want);
  }
}

TEST(FilesTest, FailingWritersReadersAndPathsFailTheCallAndChangeNothing) {
  CScaler s = make_c_scaler(nullptr);
  Stream writer;
  writer.fail_at = 1;
  EXPECT_EQ(mixprec_grad_scaler_save_to(s.get(), &Stream::write, &writer), MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find(
                "mixprec_grad_scaler_save_to: the writer failed writing"), std::string::npos)
      << mixprec_last_error();
  Stream good;
  MIXPREC_C_OK(mixprec_grad_scaler_save_to(s.get(), &Stream::write, &good));
  const std::vector<char> before = scaler_bytes(s.get());
  good.calls = 0;
  good.fail_at = 2;
  EXPECT_EQ(mixprec_grad_scaler_load_from(s.get(), &Stream::read, &good, good.bytes.size()),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find("its reader failed reading"), std::string::npos)
      << mixprec_last_error();
  EXPECT_TRUE(scaler_bytes(s.get()) == before);
  EXPECT_EQ(mixprec_grad_scaler_save(s.get(), "/nonexistent-mixprec-folder/s.pt"),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_NE(std::string(mixprec_last_error()).find(
                "mixprec_grad_scaler_save: cannot save /nonexistent-mixprec-folder/s.pt: open() failed"),
            std::string::npos)
      << mixprec_last_error();
  EXPECT_EQ(mixprec_grad_scaler_load(s.get(), "/nonexistent-mixprec-folder/s.pt"),
            MIXPREC_ERROR_RUNTIME);
  EXPECT_TRUE(scaler_bytes(s.get()) == before);
}

// An optimizer's state through a path and through streams, both conventions: the moments come
// back bit for bit.
TEST(FilesTest, AnOptimizerSavedToAPathOrAStreamLoadsBack) {
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  w.mutable_grad() = torch::full({3}, 0.25);
  torch::optim::Adam adam({w}, torch::optim::AdamOptions(0.1));
  adam.step();
  auto shared = std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{w},
                                                     torch::optim::AdamOptions(0.1));
  std::shared_ptr<torch::optim::Optimizer> shared_base = shared;
  shared->step();
  const std::string path = ::testing::TempDir() + "mixprec_c_files_optimizer.pt";
  const std::vector<char> want = pickle_save_untagged(optimizer_state_dict(adam));
  for (const bool is_shared : {false, true}) {
    void* handle = is_shared ? static_cast<void*>(&shared_base) : static_cast<void*>(&adam);
    MIXPREC_C_OK(is_shared ? mixprec_optimizer_save_shared(handle, path.c_str())
                           : mixprec_optimizer_save(handle, path.c_str()));
    EXPECT_TRUE(file_bytes(path) == want);
    Stream stream;
    MIXPREC_C_OK(is_shared ? mixprec_optimizer_save_to_shared(handle, &Stream::write, &stream)
                           : mixprec_optimizer_save_to(handle, &Stream::write, &stream));
    EXPECT_TRUE(stream.bytes == want);
    for (const bool from_path : {true, false}) {
      torch::Tensor v = torch::ones({3}, torch::requires_grad());
      torch::optim::Adam fresh({v}, torch::optim::AdamOptions(0.5));
      auto fresh_shared = std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{v},
                                                               torch::optim::AdamOptions(0.5));
      std::shared_ptr<torch::optim::Optimizer> fresh_base = fresh_shared;
      void* into = is_shared ? static_cast<void*>(&fresh_base) : static_cast<void*>(&fresh);
      stream.calls = 0;
      const uint64_t n = stream.bytes.size();
      MIXPREC_C_OK(from_path ? (is_shared ? mixprec_optimizer_load_shared(into, path.c_str())
                                          : mixprec_optimizer_load(into, path.c_str()))
                             : (is_shared ? mixprec_optimizer_load_from_shared(into, &Stream::read, &stream, n)
                                          : mixprec_optimizer_load_from(into, &Stream::read, &stream, n)));
      const torch::optim::Optimizer& got = is_shared ? *fresh_base : fresh;
      EXPECT_TRUE(pickle_save_untagged(optimizer_state_dict(got)) == want);
    }
  }
}

}  // namespace
}  // namespace mixprec::c_api_test
