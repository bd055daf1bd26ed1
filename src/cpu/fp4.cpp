// CPU FP4 kernels: cut the tensor into pieces of whole blocks (or 16-row bands of tiles for 2D
// NVFP4) and run them on OpenMP threads. NVFP4 1D rounded to nearest and MXFP4 run the Highway
// loops of fp4_simd.cpp; 2D tiles, stochastic rounding, the RHT and the dequantizes run each block
// with the host/device functions of core/fp4_ops.h that the CUDA kernels run too (portable loops,
// vectorized only as far as the compiler does; the element type is a template parameter, hoisted
// out of the loops). Both give the rules' bits (tests/core/fp4_blocks_test.cpp).
#include "cpu/fp4.h"

#include <algorithm>
#include <cstdint>

#include "core/fp4_ops.h"
#include "cpu/fp4_simd.h"
#include "cpu/threads.h"

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "mixprec kernels must not be built with fast math: it removes the guarantees about NaN and inf"
#endif

namespace mixprec::core::cpu {
namespace {

// Runs body(first, last) over the units [0, count) in contiguous runs, one a thread, on as many
// threads as `bytes` of streaming work warrants (cpu/threads.h). body must not throw.
template <typename Body>
void parallel_units(std::int64_t count, std::int64_t bytes, const Body& body) {
  if (count <= 0) return;
  const int threads = std::max(1, threads_for_bytes(bytes));
  const std::int64_t per_piece = std::max<std::int64_t>(1, (count + threads - 1) / threads);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::int64_t first = 0; first < count; first += per_piece) {
    body(first, std::min(count, first + per_piece));
  }
}

// Calls f(loader) with a loader of x's dtype: loader(i) is element i as a float.
template <typename F>
void with_loader(const TensorView& x, const F& f) {
  const void* data = x.data;
  switch (x.dtype) {
    case DType::kFloat32:
      f([data](std::int64_t i) { return static_cast<const float*>(data)[i]; });
      return;
    case DType::kFloat64:
      f([data](std::int64_t i) { return static_cast<float>(static_cast<const double*>(data)[i]); });
      return;
    case DType::kFloat16:
      f([data](std::int64_t i) {
        return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
      });
      return;
    case DType::kBFloat16:
      f([data](std::int64_t i) {
        return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
      });
      return;
  }
}

// Calls f(storer) with a storer of out's dtype: storer(i, v) writes v rounded to nearest even.
template <typename F>
void with_storer(const TensorView& out, const F& f) {
  void* data = out.data;
  switch (out.dtype) {
    case DType::kFloat32:
      f([data](std::int64_t i, float v) { static_cast<float*>(data)[i] = v; });
      return;
    case DType::kFloat64:
      f([data](std::int64_t i, float v) { static_cast<double*>(data)[i] = v; });
      return;
    case DType::kFloat16:
      f([data](std::int64_t i, float v) {
        static_cast<std::uint16_t*>(data)[i] = float_to_half_bits(v);
      });
      return;
    case DType::kBFloat16:
      f([data](std::int64_t i, float v) {
        static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(v);
      });
      return;
  }
}

std::int64_t bytes_of(const TensorView& view) {
  return view.numel * static_cast<std::int64_t>(element_size(view.dtype));
}

}  // namespace

void quantize_nvfp4(const TensorView& x, std::int64_t cols, float amax, std::uint8_t* q,
                    std::uint8_t* block_scales, const Nvfp4Options& options) {
  const float encode_scale = nvfp4_encode_scale(amax);
  const float decode_scale = 1.0f / encode_scale;
  const bool stochastic = options.stochastic;
  const std::uint64_t seed = options.seed, offset = options.offset;
  with_loader(x, [&](const auto& load) {
    // One block of 16: its elements at `first`, its amax (or its tile's) given.
    const auto encode_block = [&](std::int64_t first, std::uint8_t block_scale) {
      float v[16];
      for (int i = 0; i < 16; ++i) v[i] = load(first + i);
      std::uint32_t random[4];
      if (stochastic) philox_bytes(seed, offset, static_cast<std::uint64_t>(first / 16), random);
      encode_e2m1_16(v, nvfp4_block_encode(block_scale, decode_scale),
                     stochastic ? random : nullptr, q + first / 2);
    };
    if (!options.two_d && !stochastic) {  // the SIMD loop (fp4_simd.cpp)
      parallel_units(x.numel / 16, bytes_of(x), [&](std::int64_t first, std::int64_t last) {
        quantize_nvfp4_blocks(x, encode_scale, q, block_scales, first, last);
      });
      return;
    }
    if (!options.two_d) {
      parallel_units(x.numel / 16, bytes_of(x), [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t b = first; b < last; ++b) {
          float v[16];
          for (int i = 0; i < 16; ++i) v[i] = load(b * 16 + i);
          const std::uint8_t s = nvfp4_block_scale(amax_skip_nan(v, 16), encode_scale);
          block_scales[b] = s;
          encode_block(b * 16, s);
        }
      });
      return;
    }
    // 2D: bands of 16 rows; tile j of a band spans columns 16j .. 16j + 15 of its 16 rows.
    const std::int64_t blocks_per_row = cols / 16;
    parallel_units(x.numel / cols / 16, bytes_of(x), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t band = first; band < last; ++band) {
        const std::int64_t row0 = band * 16;
        for (std::int64_t j = 0; j < blocks_per_row; ++j) {
          float tile_amax = 0.0f;
          for (std::int64_t r = 0; r < 16; ++r) {
            float v[16];
            for (int i = 0; i < 16; ++i) v[i] = load((row0 + r) * cols + j * 16 + i);
            const float a = amax_skip_nan(v, 16);
            tile_amax = a > tile_amax ? a : tile_amax;
          }
          const std::uint8_t s = nvfp4_block_scale(tile_amax, encode_scale);
          for (std::int64_t r = 0; r < 16; ++r) {
            block_scales[(row0 + r) * blocks_per_row + j] = s;
            encode_block((row0 + r) * cols + j * 16, s);
          }
        }
      }
    });
  });
}

void dequantize_nvfp4(const std::uint8_t* q, const std::uint8_t* block_scales, float amax,
                      std::int64_t cols, const TensorView& out) {
  (void)cols;  // the scales are per row and block: the layout is flat whatever the tiling
  with_storer(out, [&](const auto& store) {
    parallel_units(out.numel / 16, bytes_of(out), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t b = first; b < last; ++b) {
        float v[16];
        decode_e2m1_16(q + b * 8, nvfp4_block_decode(block_scales[b], amax), v);
        for (int i = 0; i < 16; ++i) store(b * 16 + i, v[i]);
      }
    });
  });
}

void quantize_mxfp4(const TensorView& x, std::uint8_t* q, std::uint8_t* scales, MxScaleMode mode) {
  parallel_units(x.numel / 32, bytes_of(x), [&](std::int64_t first, std::int64_t last) {
    quantize_mxfp4_blocks(x, mode, q, scales, first, last);  // the SIMD loop (fp4_simd.cpp)
  });
}

void dequantize_mxfp4(const std::uint8_t* q, const std::uint8_t* scales, const TensorView& out) {
  with_storer(out, [&](const auto& store) {
    parallel_units(out.numel / 32, bytes_of(out), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t b = first; b < last; ++b) {
        float v[32];
        const float decode = e8m0_to_float(scales[b]);
        decode_e2m1_16(q + b * 16, decode, v);
        decode_e2m1_16(q + b * 16 + 8, decode, v + 16);
        for (int i = 0; i < 32; ++i) store(b * 32 + i, v[i]);
      }
    });
  });
}

void hadamard16(const TensorView& x, std::uint16_t* out) {
  with_loader(x, [&](const auto& load) {
    parallel_units(x.numel / 16, bytes_of(x), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t g = first; g < last; ++g) {
        float v[16];
        for (int i = 0; i < 16; ++i) v[i] = load(g * 16 + i);
        core::hadamard16(v, out + g * 16);
      }
    });
  });
}

}  // namespace mixprec::core::cpu
