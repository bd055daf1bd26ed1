// The host half of the multi-tensor launches (src/cuda/multi_tensor.cuh), run without a GPU:
// whatever the mix of tensor sizes, the launches cover every element of every tensor exactly
// once, in chunks of kChunk, within the per-launch limits, so no block reads another launch's
// tensor slot.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/multi_tensor.cuh"

namespace mixprec::core::cuda {
namespace {

using Meta = ChunkMeta<2, 5, 7>;  // small limits, so the plans cross them often

// Element coverage of each tensor after planning launches for `sizes`.
std::vector<std::vector<int>> coverage(const std::vector<std::int64_t>& sizes, int* launches) {
  std::vector<std::vector<int>> covered(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) covered[i].assign(sizes[i], 0);
  std::vector<int> owner;  // tensor index behind each slot of the current launch
  *launches = 0;
  for_each_launch<Meta>(
      sizes.size(), [&](std::size_t i) { return sizes[i]; },
      [&](Meta& meta, int slot, std::size_t i) {
        meta.data[0][slot] = &covered[i];
        meta.data[1][slot] = nullptr;
      },
      [&](const Meta& meta, int blocks) {
        ++*launches;
        EXPECT_GE(blocks, 1);
        EXPECT_LE(blocks, Meta::kMaxBlocksPerLaunch);
        for (int b = 0; b < blocks; ++b) {  // what block_chunk() computes on the device
          const int t = meta.block_tensor[b];
          ASSERT_LT(t, Meta::kMaxTensorsPerLaunch);
          auto& cells = *static_cast<std::vector<int>*>(meta.data[0][t]);
          ASSERT_EQ(meta.numel[t], static_cast<std::int64_t>(cells.size()));
          const std::int64_t begin = static_cast<std::int64_t>(meta.block_chunk[b]) * kChunk;
          const std::int64_t end = std::min(begin + kChunk, meta.numel[t]);
          ASSERT_LT(begin, end);
          for (std::int64_t e = begin; e < end; ++e) ++cells[static_cast<std::size_t>(e)];
        }
      });
  return covered;
}

TEST(LaunchPlanTest, EveryElementIsCoveredExactlyOnce) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int64_t> sizes(rng() % 30);
    for (auto& n : sizes) {
      const unsigned kind = rng() % 4;  // empty, tiny, around a chunk, many chunks
      n = kind == 0   ? 0
          : kind == 1 ? rng() % 100
          : kind == 2 ? kChunk - 1 + rng() % 3
                      : rng() % (20 * kChunk);
    }
    int launches = 0;
    const auto covered = coverage(sizes, &launches);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      for (std::size_t e = 0; e < covered[i].size(); ++e) {
        ASSERT_EQ(covered[i][e], 1) << "trial " << trial << " tensor " << i << " element " << e;
      }
    }
  }
}

TEST(LaunchPlanTest, NothingToDoLaunchesNothing) {
  int launches = -1;
  coverage({}, &launches);
  EXPECT_EQ(launches, 0);
  coverage({0, 0, 0}, &launches);
  EXPECT_EQ(launches, 0);
}

TEST(LaunchPlanTest, LaunchesAreFullBeforeANewOneStarts) {
  // 3 tensors of 3 chunks: 9 blocks, at most 7 per launch -> 2 launches; the tensor cut at the
  // limit goes on as the first slot of the second launch.
  int launches = 0;
  coverage({3 * kChunk, 3 * kChunk, 3 * kChunk}, &launches);
  EXPECT_EQ(launches, 2);
  // 12 one-chunk tensors: at most 5 slots per launch -> 3 launches.
  coverage(std::vector<std::int64_t>(12, 10), &launches);
  EXPECT_EQ(launches, 3);
}

}  // namespace
}  // namespace mixprec::core::cuda
