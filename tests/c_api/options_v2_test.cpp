// The options struct across versions, from the side of a later library: src/c/options.cpp built
// against a "version 2" c_api.h (tests/c_api/CMakeLists.txt generates it from the real header by
// appending one field), as a future release will be. An old caller's version-1 struct must not
// be written past its end, and a caller of the new header must get its whole struct.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "c/guard.h"
#include "c/options.h"
#include "mixprec/c_api.h"

namespace {

using mixprec::c_api::kOptionsV1Size;

constexpr unsigned char kGuard = 0xab;

// The size a version-1 header gives the struct (LP64: 88 bytes); the field added by the test
// header is past it.
static_assert(offsetof(mixprec_grad_scaler_options, v2_field) >= kOptionsV1Size);
static_assert(sizeof(mixprec_grad_scaler_options) > kOptionsV1Size);

// A version-1 caller's struct in a buffer whose bytes past it are guards.
struct OldCaller {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(kOptionsV1Size + 64, kGuard);
  mixprec_grad_scaler_options* options() {
    return reinterpret_cast<mixprec_grad_scaler_options*>(bytes.data());
  }
  // The first guard byte written, or -1.
  std::ptrdiff_t first_overrun() const {
    for (std::size_t i = kOptionsV1Size; i < bytes.size(); ++i) {
      if (bytes[i] != kGuard) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  }
};

TEST(OptionsVersionsTest, TheExportedDefaultWritesOnlyVersionOne) {
  OldCaller old;
  // The function itself, as a binding or an old binary calls it (not the header's macro).
  (mixprec_grad_scaler_options_default)(old.options());
  EXPECT_EQ(old.first_overrun(), -1);
  EXPECT_EQ(old.options()->struct_size, kOptionsV1Size);
  EXPECT_EQ(old.options()->init_scale, 65536.0);
  EXPECT_EQ(old.options()->history_size, 0);
}

TEST(OptionsVersionsTest, InitWithVersionOnesSizeWritesOnlyVersionOne) {
  OldCaller old;
  ASSERT_EQ(mixprec_grad_scaler_options_init(old.options(), kOptionsV1Size), MIXPREC_OK);
  EXPECT_EQ(old.first_overrun(), -1);
  EXPECT_EQ(old.options()->struct_size, kOptionsV1Size);
  EXPECT_EQ(old.options()->growth_interval, 2000);
}

TEST(OptionsVersionsTest, TheMacroFillsTheCallersWholeStruct) {
  struct {
    mixprec_grad_scaler_options options;
    unsigned char guard[64];
  } caller;
  std::memset(&caller, kGuard, sizeof caller);
  mixprec_grad_scaler_options_default(&caller.options);  // the header's macro: _init(sizeof)
  EXPECT_EQ(caller.options.struct_size, sizeof(mixprec_grad_scaler_options));
  EXPECT_EQ(caller.options.v2_field, 0.0);  // written: past version 1, inside the caller's struct
  EXPECT_EQ(caller.options.backoff_factor, 0.5);
  for (unsigned char b : caller.guard) ASSERT_EQ(b, kGuard);
}

TEST(OptionsVersionsTest, UnknownSizesAreRefusedWithoutWriting) {
  OldCaller old;
  EXPECT_EQ(mixprec_grad_scaler_options_init(old.options(), kOptionsV1Size - 8),
            MIXPREC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mixprec_last_error()).find("is no version's size"), std::string::npos)
      << mixprec_last_error();
  EXPECT_EQ(old.bytes[0], kGuard);
  EXPECT_EQ(mixprec_grad_scaler_options_init(nullptr, kOptionsV1Size),
            MIXPREC_ERROR_NULL_ARGUMENT);
}

TEST(OptionsVersionsTest, CreateReadsEveryKnownVersion) {
  OldCaller old;
  (mixprec_grad_scaler_options_default)(old.options());
  old.options()->init_scale = 1024.0;
  EXPECT_EQ(mixprec::c_api::to_options(*old.options()).init_scale(), 1024.0);

  mixprec_grad_scaler_options current;
  mixprec_grad_scaler_options_default(&current);
  current.growth_interval = 7;
  EXPECT_EQ(mixprec::c_api::to_options(current).growth_interval(), 7);

  current.struct_size = kOptionsV1Size + 4;
  EXPECT_THROW(mixprec::c_api::to_options(current), mixprec::c_api::Failure);
}

}  // namespace
