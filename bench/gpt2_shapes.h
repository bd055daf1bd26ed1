// The parameter shapes of GPT-2 small (124M), shared by the optimizer benchmarks (CPU and GPU).
#pragma once

#include <cstdint>
#include <vector>

namespace mixprec_bench {

/// Token and position embeddings, 12 blocks of (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
/// mlp.c_proj) and ln_f, each with its bias.
inline std::vector<std::vector<std::int64_t>> gpt2_small_shapes() {
  constexpr std::int64_t d = 768;
  std::vector<std::vector<std::int64_t>> shapes{{50257, d}, {1024, d}};
  for (int layer = 0; layer < 12; ++layer) {
    const std::vector<std::vector<std::int64_t>> block{
        {d}, {d}, {d, 3 * d}, {3 * d}, {d, d}, {d}, {d}, {d}, {d, 4 * d}, {4 * d}, {4 * d, d}, {d}};
    shapes.insert(shapes.end(), block.begin(), block.end());
  }
  shapes.push_back({d});
  shapes.push_back({d});
  return shapes;
}

}  // namespace mixprec_bench
