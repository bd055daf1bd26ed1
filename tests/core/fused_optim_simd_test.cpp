// The CPU fused optimizers on every compiled SIMD target and every storage dtype give, bit for
// bit, the scalar element math of src/core/element_ops.h (the math the CUDA kernels run, and
// which tests/torch/optim_test.cpp checks against torch::optim), with fp16/bf16 computed in float
// and rounded to nearest even once per store (include/mixprec/core/half.h). Spans of odd lengths
// at odd offsets cover whole vectors, the one-lane remainder and unaligned loads; the values
// include inf, NaN, -0 and subnormals of each dtype. A NaN result need only be a NaN: IEEE 754
// leaves open which operand's NaN an operation passes on when both are NaN, and compilers may
// swap the operands of a commutative add or multiply (seen here: fp16 SGD with momentum on the
// targets without F16C gave +NaN where the scalar code gave -NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/element_ops.h"
#include "cpu/unscale_targets.h"
#include "mixprec/core/half.h"
#include "mixprec/core/optim_kernels.h"

namespace mixprec::core {
namespace {

// Values of one dtype held as doubles (exactly representable in that dtype), with their bits.
struct Typed {
  DType dtype;
  std::size_t size() const { return dtype == DType::kFloat64 ? 8 : dtype == DType::kFloat32 ? 4 : 2; }
  // Rounds x to the dtype (nearest even) and returns it widened to double.
  double round(double x) const {
    switch (dtype) {
      case DType::kFloat64:
        return x;
      case DType::kFloat32:
        return static_cast<float>(x);
      case DType::kFloat16:
        return half_bits_to_float(float_to_half_bits(static_cast<float>(x)));
      case DType::kBFloat16:
        return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x)));
    }
    return x;
  }
  void store(double x, unsigned char* p) const {
    if (dtype == DType::kFloat64) {
      std::memcpy(p, &x, 8);
    } else if (dtype == DType::kFloat32) {
      const float f = static_cast<float>(x);
      std::memcpy(p, &f, 4);
    } else {
      const float f = static_cast<float>(x);
      const std::uint16_t b =
          dtype == DType::kFloat16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
      std::memcpy(p, &b, 2);
    }
  }
  double load(const unsigned char* p) const {
    if (dtype == DType::kFloat64) {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    if (dtype == DType::kFloat32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    std::uint16_t b;
    std::memcpy(&b, p, 2);
    return dtype == DType::kFloat16 ? half_bits_to_float(b) : bf16_bits_to_float(b);
  }
};

// One array of n elements of a dtype at an odd element offset in its allocation.
struct Array {
  Typed type;
  std::vector<unsigned char> bytes;
  std::int64_t n;
  static constexpr std::int64_t kOffset = 3;
  Array(Typed t, std::int64_t count) : type(t), bytes((count + kOffset) * t.size()), n(count) {}
  unsigned char* at(std::int64_t i) { return bytes.data() + (i + kOffset) * type.size(); }
  TensorView view() { return {at(0), n, type.dtype}; }
};

// Mostly ordinary values, some specials; `positive` for second moments.
void fill(Array& a, std::mt19937& rng, double scale, bool positive, bool specials) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> pick(0, 199);
  for (std::int64_t i = 0; i < a.n; ++i) {
    double x = scale * normal(rng);
    if (positive) x = std::abs(x);
    if (specials) {
      switch (pick(rng)) {
        case 0: x = INFINITY; break;
        case 1: x = -INFINITY; break;
        case 2: x = NAN; break;
        case 3: x = -0.0; break;
        case 4: x = 1e-300 * 1e-10 * (a.type.dtype == DType::kFloat64 ? 1e-8 : 1.0); break;
        case 5: x = (a.type.dtype == DType::kFloat16 ? 3e-6 : 1e-40) * (positive ? 1 : -1); break;
        default: break;
      }
    }
    a.type.store(a.type.round(x), a.at(i));
  }
}

// Same bits, or both NaN.
void expect_same(const Array& ours, const Array& ref, const std::string& what) {
  ASSERT_EQ(ours.bytes.size(), ref.bytes.size());
  const std::size_t size = ours.type.size();
  for (std::int64_t i = 0; i < ours.n; ++i) {
    const auto* a = ours.bytes.data() + (i + Array::kOffset) * size;
    const auto* b = ref.bytes.data() + (i + Array::kOffset) * size;
    if (std::memcmp(a, b, size) != 0 &&
        !(std::isnan(ours.type.load(a)) && std::isnan(ref.type.load(b)))) {
      ADD_FAILURE() << what << ": element " << i << " of " << ours.n << " is "
                    << ours.type.load(a) << ", the scalar math gives " << ref.type.load(b);
      return;
    }
  }
}

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
const char* name_of(DType d) {
  return d == DType::kFloat32 ? "float32" : d == DType::kFloat64 ? "float64"
                                          : d == DType::kFloat16 ? "float16" : "bfloat16";
}
// Lengths: below one vector, a few vectors and a remainder, and enough for several threads.
const std::int64_t kLengths[] = {1, 7, 67, 1029, 300007};

// Runs `body(target_name)` on every SIMD target this binary has and this CPU runs.
template <typename Body>
void on_every_target(const Body& body) {
  for (std::int64_t target : cpu::simd_targets()) {
    cpu::force_simd_target(target);
    body(std::string(cpu::simd_target_name(target)));
  }
  cpu::force_simd_target(0);
}

// The scalar reference of one element: load (exact), the element op in the compute type C,
// store (rounded once) what the step writes.
template <typename C, typename Op>
void reference_element(const Op& op, Array* arrays[], const bool writes[], int depth,
                       std::int64_t i) {
  C e[Op::kDepth];
  for (int k = 0; k < depth; ++k) e[k] = static_cast<C>(arrays[k]->type.load(arrays[k]->at(i)));
  op(e);
  for (int k = 0; k < depth; ++k) {
    if (writes[k]) arrays[k]->type.store(static_cast<double>(e[k]), arrays[k]->at(i));
  }
}

struct SgdCase {
  double momentum, dampening, weight_decay;
  bool nesterov, first;
  float scale;
};

template <typename C>
void sgd_reference(const SgdCase& c, const SgdHyper& h, float inv, Array& p, Array& g, Array& b) {
  SgdOp<C, true> op = make_sgd_op<C, true>(h, inv, nullptr);
  op.first = c.first;
  Array* arrays[] = {&p, &g, &b};
  const bool writes[] = {true, inv != 1.0f, true};
  for (std::int64_t i = 0; i < p.n; ++i) {
    if (c.momentum != 0) {
      reference_element<C>(op, arrays, writes, 3, i);
    } else {
      SgdOp<C, false> plain{op.inv_scale, op.weight_decay, op.momentum, op.one_minus_dampening,
                            op.neg_lr,    op.clip_coef,    op.unscale,  op.decay,
                            false,        false,           op.clip};
      reference_element<C>(plain, arrays, writes, 2, i);
    }
  }
}

TEST(FusedOptimSimdTest, SgdIsTheScalarMathOnEveryTargetAndDType) {
  const SgdCase cases[] = {{0.0, 0.0, 0.0, false, false, 1024.0f},
                           {0.9, 0.1, 0.01, false, false, 65536.0f},
                           {0.9, 0.0, 0.0, true, false, 1.0f},
                           {0.5, 0.2, 0.1, true, true, 3.0f}};
  on_every_target([&](const std::string& target) {
    for (DType dtype : kDTypes) {
      for (const SgdCase& c : cases) {
        for (std::int64_t n : kLengths) {
          const std::string what = target + ", " + name_of(dtype) + ", momentum " +
                                   std::to_string(c.momentum) + ", n " + std::to_string(n);
          std::mt19937 rng(static_cast<unsigned>(n));
          const Typed t{dtype};
          Array p(t, n), g(t, n), b(t, n);
          fill(p, rng, 1.0, false, true);
          fill(g, rng, c.scale, false, true);
          fill(b, rng, 0.1, false, true);
          Array rp = p, rg = g, rb = b;
          SgdHyper h;
          h.lr = 0.01;
          h.momentum = c.momentum;
          h.dampening = c.dampening;
          h.weight_decay = c.weight_decay;
          h.nesterov = c.nesterov;
          SgdTensors view{p.view(), g.view(), b.view(), c.first};
          ASSERT_TRUE(fused_sgd_(&view, 1, h, &c.scale, nullptr)) << what;
          const float inv = static_cast<float>(1.0 / static_cast<double>(c.scale));
          if (dtype == DType::kFloat64) {
            sgd_reference<double>(c, h, inv, rp, rg, rb);
          } else {
            sgd_reference<float>(c, h, inv, rp, rg, rb);
          }
          expect_same(p, rp, what + ", param");
          expect_same(g, rg, what + ", grad");
          expect_same(b, rb, what + ", buffer");
        }
      }
    }
  });
}

template <typename C, bool kAmsgrad>
void adam_reference(const AdamHyper& h, float inv, std::int64_t step, Array* arrays[]) {
  const auto op = make_adam_op<C, kAmsgrad>(h, inv, step);
  const bool writes[] = {true, inv != 1.0f, true, true, true};
  for (std::int64_t i = 0; i < arrays[0]->n; ++i) {
    reference_element<C>(op, arrays, writes, kAmsgrad ? 5 : 4, i);
  }
}

TEST(FusedOptimSimdTest, AdamIsTheScalarMathOnEveryTargetAndDType) {
  struct Case {
    double weight_decay;
    bool decoupled, amsgrad;
    float scale;
    std::int64_t step;
  };
  const Case cases[] = {{0.0, false, false, 1024.0f, 1},
                        {0.01, false, true, 65536.0f, 7},
                        {0.1, true, false, 1.0f, 3},
                        {0.1, true, true, 3.0f, 1000}};
  on_every_target([&](const std::string& target) {
    for (DType dtype : kDTypes) {
      for (const Case& c : cases) {
        for (std::int64_t n : kLengths) {
          const std::string what = target + ", " + name_of(dtype) + ", amsgrad " +
                                   std::to_string(c.amsgrad) + ", decoupled " +
                                   std::to_string(c.decoupled) + ", n " + std::to_string(n);
          std::mt19937 rng(static_cast<unsigned>(n) + 5);
          const Typed t{dtype};
          Array p(t, n), g(t, n), m(t, n), v(t, n), vmax(t, n);
          fill(p, rng, 1.0, false, true);
          fill(g, rng, c.scale * 0.01, false, true);
          fill(m, rng, 0.01, false, true);
          fill(v, rng, 1e-4, true, true);
          fill(vmax, rng, 1e-4, true, true);
          Array rp = p, rg = g, rm = m, rv = v, rvmax = vmax;
          AdamHyper h;
          h.lr = 0.01;
          h.weight_decay = c.weight_decay;
          h.decoupled_weight_decay = c.decoupled;
          h.amsgrad = c.amsgrad;
          AdamTensors view{p.view(), g.view(), m.view(), v.view(), vmax.view(), c.step};
          ASSERT_TRUE(fused_adam_(&view, 1, h, &c.scale, nullptr)) << what;
          const float inv = static_cast<float>(1.0 / static_cast<double>(c.scale));
          Array* ref[] = {&rp, &rg, &rm, &rv, &rvmax};
          if (dtype == DType::kFloat64) {
            c.amsgrad ? adam_reference<double, true>(h, inv, c.step, ref)
                      : adam_reference<double, false>(h, inv, c.step, ref);
          } else {
            c.amsgrad ? adam_reference<float, true>(h, inv, c.step, ref)
                      : adam_reference<float, false>(h, inv, c.step, ref);
          }
          expect_same(p, rp, what + ", param");
          expect_same(g, rg, what + ", grad");
          expect_same(m, rm, what + ", exp_avg");
          expect_same(v, rv, what + ", exp_avg_sq");
          expect_same(vmax, rvmax, what + ", max_exp_avg_sq");
        }
      }
    }
  });
}

}  // namespace
}  // namespace mixprec::core
