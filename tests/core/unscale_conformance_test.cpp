// Conformance suite of the unscale-and-check kernel (STYLE.md §Tests), run for every backend
// built: each element is compared bit for bit with the scalar reference of core/reference.h.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/reference.h"
#include "cpu/unscale_targets.h"
#include "mixprec/core/error.h"
#include "mixprec/core/kernels.h"

namespace mixprec::core {
namespace {

using testing::reference_nonfinite;
using testing::reference_unscaled;

// A kernel under test: the same signature as the public dispatch point.
using UnscaleFn = void (*)(const TensorView*, std::size_t, float*, const float*);

struct Backend {
  std::string name;
  UnscaleFn fn;
};
void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

void dispatch(const TensorView* grads, std::size_t count, float* found_inf, const float* inv) {
  non_finite_check_and_unscale_(grads, count, found_inf, inv);
}

// The Highway targets compiled in and supported by this CPU, read once before any is forced.
const std::vector<std::int64_t>& simd_targets() {
  static const std::vector<std::int64_t> targets = cpu::simd_targets();
  return targets;
}

// Runs the public dispatch point with the CPU kernel restricted to one SIMD target.
template <std::size_t kIndex>
void on_simd_target(const TensorView* grads, std::size_t count, float* found_inf,
                    const float* inv) {
  const std::int64_t target = simd_targets()[kIndex];
  cpu::force_simd_target(target);
  EXPECT_EQ(cpu::dispatched_simd_target(), target) << cpu::simd_target_name(target);
  non_finite_check_and_unscale_(grads, count, found_inf, inv);
  cpu::force_simd_target(0);
}

template <std::size_t... kIndex>
constexpr std::array<UnscaleFn, sizeof...(kIndex)> simd_target_fns(std::index_sequence<kIndex...>) {
  return {&on_simd_target<kIndex>...};
}

std::vector<Backend> backends() {
  std::vector<Backend> out = {{"dispatch", &dispatch}};
  constexpr auto kFns = simd_target_fns(std::make_index_sequence<16>());
  for (std::size_t i = 0; i < simd_targets().size() && i < kFns.size(); ++i) {
    out.push_back({std::string("simd_") + cpu::simd_target_name(simd_targets()[i]), kFns[i]});
  }
  // Later backends (CUDA) are appended here.
  return out;
}

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
constexpr std::size_t kGuard = 64;  // bytes of sentinel before and after each view

// One tensor in a byte buffer with guard bytes around it and a chosen misalignment.
class Buffer {
 public:
  Buffer(DType dtype, std::int64_t numel, std::size_t offset_elems)
      : dtype_(dtype), numel_(numel), size_(element_size(dtype)),
        begin_(kGuard + offset_elems * size_),
        bytes_(begin_ + static_cast<std::size_t>(numel) * size_ + kGuard, 0xA5) {}

  TensorView view() { return {bytes_.data() + begin_, numel_, dtype_}; }
  std::uint64_t get(std::int64_t i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + begin_ + static_cast<std::size_t>(i) * size_, size_);
    return v;
  }
  void set(std::int64_t i, std::uint64_t v) {
    std::memcpy(bytes_.data() + begin_ + static_cast<std::size_t>(i) * size_, &v, size_);
  }
  bool guards_intact() const {
    for (std::size_t i = 0; i < begin_; ++i)
      if (bytes_[i] != 0xA5) return false;
    for (std::size_t i = begin_ + static_cast<std::size_t>(numel_) * size_; i < bytes_.size(); ++i)
      if (bytes_[i] != 0xA5) return false;
    return true;
  }

 private:
  DType dtype_;
  std::int64_t numel_;
  std::size_t size_;
  std::size_t begin_;
  std::vector<unsigned char> bytes_;
};

std::uint64_t encode(DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32: return testing::bits32(static_cast<float>(v));
    case DType::kFloat64: return testing::bits64(v);
    case DType::kFloat16: return testing::float_to_half_ref(static_cast<float>(v));
    case DType::kBFloat16: return testing::float_to_bf16_ref(static_cast<float>(v));
  }
  return 0;
}

// Finite values across the range: ordinary, tiny (subnormal in the narrow types), huge
// (overflows when multiplied by an inv_scale > 1), signed zeros.
double random_finite(DType dtype, std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  switch (kind(rng)) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return unit(rng) * 1e-6;   // fp16 subnormal range
    case 3: return unit(rng) * 1e-40;  // fp32/bf16 subnormal range
    case 4: return dtype == DType::kFloat16 ? unit(rng) * 60000.0 : unit(rng) * 3e38;
    default: return unit(rng) * 1000.0;
  }
}

std::uint64_t nonfinite_bits(DType dtype, int which) {
  const double inf = std::numeric_limits<double>::infinity();
  if (which == 0) return encode(dtype, inf);
  if (which == 1) return encode(dtype, -inf);
  switch (dtype) {  // a NaN with a payload, sign bit set
    case DType::kFloat32: return 0xffa00001u;
    case DType::kFloat64: return 0xfff4000000000001ull;
    case DType::kFloat16: return 0xfd01u;
    case DType::kBFloat16: return 0xffa1u;
  }
  return 0;
}

struct Expectation {
  std::vector<std::uint64_t> bits;
  bool found = false;
};

Expectation expect(DType dtype, const Buffer& b, std::int64_t n, float inv) {
  Expectation e;
  for (std::int64_t i = 0; i < n; ++i) {
    e.found |= reference_nonfinite(dtype, b.get(i));
    e.bits.push_back(reference_unscaled(dtype, b.get(i), inv));
  }
  return e;
}

void check_equal(DType dtype, const Buffer& b, const Expectation& e, const std::string& what) {
  for (std::size_t i = 0; i < e.bits.size(); ++i) {
    const std::uint64_t got = b.get(static_cast<std::int64_t>(i));
    const bool ref_nan = testing::reference_isnan(dtype, e.bits[i]);
    if (ref_nan) {  // NaN payloads may differ after arithmetic; NaN-ness may not
      ASSERT_TRUE(testing::reference_isnan(dtype, got)) << what << " element " << i << " should be NaN";
    } else {
      ASSERT_EQ(got, e.bits[i]) << what << " element " << i;
    }
  }
  ASSERT_TRUE(b.guards_intact()) << what << ": wrote outside the view";
}

class UnscaleConformanceTest : public ::testing::TestWithParam<Backend> {};

const std::int64_t kSizes[] = {0,  1,  2,   3,   7,   8,   9,    15,   16,   17,   31,   32,
                               33, 63, 64,  65,  127, 128, 129,  255,  256,  257,  1023, 1024,
                               1025, 4095, 4096, 4097, 16383, 16384, 16385, 65537};
const float kInvScales[] = {0.25f, 1.0f, static_cast<float>(1.0 / 3.0), 4096.0f,
                            std::ldexp(1.0f, -24)};

TEST_P(UnscaleConformanceTest, MatchesScalarReferenceForEveryDTypeSizeOffsetAndPosition) {
  std::mt19937 rng(1234);
  for (DType dtype : kDTypes) {
    for (std::int64_t n : kSizes) {
      for (std::size_t offset : {0, 1, 3}) {
        for (float inv : kInvScales) {
          // -1: no non-finite; else a non-finite at first, middle, last element.
          for (int where = -1; where < 3; ++where) {
            if (where >= 0 && n == 0) continue;
            Buffer b(dtype, n, offset);
            for (std::int64_t i = 0; i < n; ++i) b.set(i, encode(dtype, random_finite(dtype, rng)));
            if (where >= 0) {
              const std::int64_t pos = where == 0 ? 0 : where == 1 ? n / 2 : n - 1;
              b.set(pos, nonfinite_bits(dtype, (where + static_cast<int>(n)) % 3));
            }
            const Expectation e = expect(dtype, b, n, inv);
            float found = 0.0f;
            TensorView v = b.view();
            GetParam().fn(&v, 1, &found, &inv);
            const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                     " offset=" + std::to_string(offset) +
                                     " inv=" + std::to_string(inv) + " where=" + std::to_string(where);
            ASSERT_EQ(found, e.found ? 1.0f : 0.0f) << what;
            check_equal(dtype, b, e, what);
          }
        }
      }
    }
  }
}

TEST_P(UnscaleConformanceTest, RandomBitPatternsIncludingNaNPayloads) {
  std::mt19937_64 rng(99);
  for (DType dtype : kDTypes) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::int64_t n = static_cast<std::int64_t>(rng() % 3000);
      Buffer b(dtype, n, static_cast<std::size_t>(rng() % 4));
      for (std::int64_t i = 0; i < n; ++i) b.set(i, rng());
      const float inv = kInvScales[rng() % 5];
      const Expectation e = expect(dtype, b, n, inv);
      float found = 0.0f;
      TensorView v = b.view();
      GetParam().fn(&v, 1, &found, &inv);
      ASSERT_EQ(found, e.found ? 1.0f : 0.0f);
      check_equal(dtype, b, e, std::string(dtype_name(dtype)) + " random bits");
    }
  }
}

TEST_P(UnscaleConformanceTest, InvScaleOnePassesNaNPayloadsAndSubnormalsBitExactly) {
  for (DType dtype : kDTypes) {
    Buffer b(dtype, 5, 0);
    b.set(0, nonfinite_bits(dtype, 2));
    b.set(1, 1);                           // smallest positive subnormal
    b.set(2, encode(dtype, -0.0));
    b.set(3, nonfinite_bits(dtype, 0));
    b.set(4, encode(dtype, 3.0));
    std::vector<std::uint64_t> before;
    for (int i = 0; i < 5; ++i) before.push_back(b.get(i));
    float found = 0.0f;
    const float one = 1.0f;
    TensorView v = b.view();
    GetParam().fn(&v, 1, &found, &one);
    EXPECT_EQ(found, 1.0f);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(b.get(i), before[i]) << dtype_name(dtype) << " " << i;
  }
}

TEST_P(UnscaleConformanceTest, FoundInfIsNeverCleared) {
  Buffer b(DType::kFloat32, 100, 0);
  for (int i = 0; i < 100; ++i) b.set(i, encode(DType::kFloat32, 2.0));
  float found = 1.0f;
  const float inv = 0.5f;
  TensorView v = b.view();
  GetParam().fn(&v, 1, &found, &inv);
  EXPECT_EQ(found, 1.0f);
  EXPECT_EQ(testing::from_bits32(static_cast<std::uint32_t>(b.get(99))), 1.0f);
}

TEST_P(UnscaleConformanceTest, EmptyListAndZeroSizeViewsCheckNothing) {
  float found = 0.0f;
  const float inv = 0.5f;
  GetParam().fn(nullptr, 0, &found, &inv);
  EXPECT_EQ(found, 0.0f);
  TensorView empty{nullptr, 0, DType::kFloat16};
  GetParam().fn(&empty, 1, &found, &inv);
  EXPECT_EQ(found, 0.0f);
}

TEST_P(UnscaleConformanceTest, ManySmallTensorsOfMixedDTypesInOneCall) {
  std::mt19937 rng(5);
  for (int inject : {-1, 0, 1234, 4095}) {
    std::vector<Buffer> buffers;
    std::vector<DType> dtypes;
    for (int t = 0; t < 4096; ++t) {
      const DType dtype = kDTypes[rng() % 4];
      const auto n = static_cast<std::int64_t>(rng() % 40);
      buffers.emplace_back(dtype, n, rng() % 3);
      dtypes.push_back(dtype);
      for (std::int64_t i = 0; i < n; ++i) buffers.back().set(i, encode(dtype, random_finite(dtype, rng)));
    }
    if (inject >= 0) {
      Buffer& target = buffers[static_cast<std::size_t>(inject)];
      target = Buffer(dtypes[static_cast<std::size_t>(inject)], 3, 1);
      for (int i = 0; i < 3; ++i) target.set(i, encode(dtypes[static_cast<std::size_t>(inject)], 1.0));
      target.set(2, nonfinite_bits(dtypes[static_cast<std::size_t>(inject)], 0));
    }
    const float inv = 0.125f;
    std::vector<Expectation> expected;
    std::vector<TensorView> views;
    for (std::size_t t = 0; t < buffers.size(); ++t) {
      const auto n = static_cast<std::int64_t>(buffers[t].view().numel);
      expected.push_back(expect(dtypes[t], buffers[t], n, inv));
      views.push_back(buffers[t].view());
    }
    float found = 0.0f;
    GetParam().fn(views.data(), views.size(), &found, &inv);
    EXPECT_EQ(found, inject >= 0 ? 1.0f : 0.0f) << "inject=" << inject;
    for (std::size_t t = 0; t < buffers.size(); ++t) {
      check_equal(dtypes[t], buffers[t], expected[t], "tensor " + std::to_string(t));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, UnscaleConformanceTest, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

// ---- argument checks of the dispatch point (not per backend) ----

TEST(UnscaleDispatchTest, RejectsViewsOnDifferentDevices) {
  float a = 1.0f, b = 1.0f, found = 0.0f;
  const float inv = 1.0f;
  std::vector<TensorView> views = {{&a, 1, DType::kFloat32, {DeviceType::kCPU, -1}},
                                   {&b, 1, DType::kFloat32, {DeviceType::kCUDA, 0}}};
  EXPECT_THROW(non_finite_check_and_unscale_(views, &found, &inv), Error);
}

TEST(UnscaleDispatchTest, RejectsNullDataAndNegativeCounts) {
  float found = 0.0f;
  const float inv = 1.0f;
  std::vector<TensorView> null_data = {{nullptr, 4, DType::kFloat32}};
  EXPECT_THROW(non_finite_check_and_unscale_(null_data, &found, &inv), Error);
  float x = 0.0f;
  std::vector<TensorView> negative = {{&x, -1, DType::kFloat32}};
  EXPECT_THROW(non_finite_check_and_unscale_(negative, &found, &inv), Error);
  std::vector<TensorView> ok = {{&x, 1, DType::kFloat32}};
  EXPECT_THROW(non_finite_check_and_unscale_(ok, nullptr, &inv), Error);
}

TEST(UnscaleDispatchTest, CudaViewsWithoutCudaBuildSayHowToEnableIt) {
  if (cuda_kernels_built()) GTEST_SKIP() << "built with CUDA kernels";
  float x = 0.0f, found = 0.0f;
  const float inv = 1.0f;
  std::vector<TensorView> views = {{&x, 1, DType::kFloat32, {DeviceType::kCUDA, 0}}};
  try {
    non_finite_check_and_unscale_(views, &found, &inv);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MIXPREC_WITH_CUDA"), std::string::npos) << e.what();
  }
}

// ---- added with the SIMD/threaded CPU kernel ----

TEST(UnscaleSimdTargetsTest, AtLeastOneTargetIsTestedAndTheBestIsTheDefault) {
  ASSERT_FALSE(simd_targets().empty());
  EXPECT_EQ(cpu::dispatched_simd_target(), simd_targets().front());
}

// Every fp16 and bf16 bit pattern through each backend, for scales that round, overflow and
// produce subnormals: the 16-bit conversions of the SIMD targets are exact.
TEST_P(UnscaleConformanceTest, EverySixteenBitPatternMatchesTheReference) {
  const float inv_scales[] = {0.25f, 1.0f, static_cast<float>(1.0 / 3.0), 4096.0f,
                              std::ldexp(1.0f, -24), 3.0f, 1e-3f, 65504.0f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (float inv : inv_scales) {
      Buffer b(dtype, 65536, 1);
      for (std::int64_t i = 0; i < 65536; ++i) b.set(i, static_cast<std::uint64_t>(i));
      const Expectation e = expect(dtype, b, 65536, inv);
      float found = 0.0f;
      TensorView v = b.view();
      GetParam().fn(&v, 1, &found, &inv);
      EXPECT_EQ(found, 1.0f);
      check_equal(dtype, b, e, std::string(dtype_name(dtype)) + " all bits inv=" + std::to_string(inv));
    }
  }
}

// A list large enough to be split across threads: mixed dtypes, sizes around the task size,
// non-finite values at chosen places.
struct ThreadCase {
  std::vector<Buffer> buffers;
  std::vector<DType> dtypes;
};

ThreadCase make_thread_case(bool with_nonfinite) {
  std::mt19937 rng(77);
  ThreadCase c;
  const std::int64_t sizes[] = {0, 1, 17, 1000, 16383, 16385, 32767, 32769, 65535, 65537, 200003};
  for (int t = 0; t < 48; ++t) {
    const DType dtype = kDTypes[t % 4];
    const std::int64_t n = sizes[rng() % (sizeof(sizes) / sizeof(sizes[0]))];
    c.buffers.emplace_back(dtype, n, static_cast<std::size_t>(t % 3));
    c.dtypes.push_back(dtype);
    for (std::int64_t i = 0; i < n; ++i) c.buffers.back().set(i, encode(dtype, random_finite(dtype, rng)));
  }
  if (with_nonfinite) {
    int which = 0;
    for (std::size_t t = 5; t < c.buffers.size(); t += 11) {
      Buffer& b = c.buffers[t];
      const std::int64_t n = b.view().numel;
      if (n == 0) continue;
      const std::int64_t pos = which % 3 == 0 ? 0 : which % 3 == 1 ? n / 2 : n - 1;
      b.set(pos, nonfinite_bits(c.dtypes[t], which % 3));
      ++which;
    }
  }
  return c;
}

TEST_P(UnscaleConformanceTest, ResultsDoNotDependOnTheThreadCount) {
  for (bool with_nonfinite : {false, true}) {
    const float inv = static_cast<float>(1.0 / 3.0);
    std::vector<std::vector<std::uint64_t>> first_bits;
    float first_found = -1.0f;
    for (int threads : {1, 2, 3, 8}) {
      ThreadCase c = make_thread_case(with_nonfinite);
      std::vector<TensorView> views;
      std::vector<Expectation> expected;
      bool any = false;
      for (std::size_t t = 0; t < c.buffers.size(); ++t) {
        views.push_back(c.buffers[t].view());
        if (threads == 1) {
          expected.push_back(expect(c.dtypes[t], c.buffers[t], views.back().numel, inv));
          any |= expected.back().found;
        }
      }
      if (threads == 1) {
        ASSERT_EQ(any, with_nonfinite);  // the case itself is what the test means it to be
      }
      set_num_threads(threads);
      EXPECT_EQ(get_num_threads(), threads);
      float found = 0.0f;
      GetParam().fn(views.data(), views.size(), &found, &inv);
      set_num_threads(0);
      std::vector<std::vector<std::uint64_t>> bits(c.buffers.size());
      for (std::size_t t = 0; t < c.buffers.size(); ++t) {
        for (std::int64_t i = 0; i < views[t].numel; ++i) bits[t].push_back(c.buffers[t].get(i));
        ASSERT_TRUE(c.buffers[t].guards_intact()) << "threads=" << threads << " tensor " << t;
      }
      if (threads == 1) {
        ASSERT_EQ(found, with_nonfinite ? 1.0f : 0.0f);
        for (std::size_t t = 0; t < c.buffers.size(); ++t) {
          check_equal(c.dtypes[t], c.buffers[t], expected[t], "threads=1 tensor " + std::to_string(t));
        }
        first_bits = bits;
        first_found = found;
      } else {
        EXPECT_EQ(found, first_found) << "threads=" << threads;
        for (std::size_t t = 0; t < bits.size(); ++t) {
          ASSERT_EQ(bits[t], first_bits[t]) << "threads=" << threads << " tensor " << t;
        }
      }
    }
  }
}

TEST(UnscaleThreadsTest, NegativeThreadCountIsRejectedAndZeroRestoresTheDefault) {
  EXPECT_THROW(set_num_threads(-1), Error);
  set_num_threads(0);
  const int default_threads = get_num_threads();
  EXPECT_GE(default_threads, 1);
  set_num_threads(5);
  EXPECT_EQ(get_num_threads(), 5);
  set_num_threads(0);
  EXPECT_EQ(get_num_threads(), default_threads);
}

}  // namespace
}  // namespace mixprec::core
