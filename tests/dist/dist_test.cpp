// Multi-process tests of mixprec::distributed: starts 2 or 4 dist_worker processes (Gloo over a
// FileStore in a fresh temp directory, loopback only), waits for them with a deadline, and
// compares what every rank saw. No LibTorch here: the ranks do the training; the expected FP8
// amaxes and delayed scales are computed here, from the ranks' inputs.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

// The ranks meet over Gloo. When mixprec was built without Gloo's headers (LibTorch without
// Gloo, or no libgloo-dev), make_gloo_process_group throws: every test is skipped, saying why.
#define SKIP_WITHOUT_GLOO()                                                                    \
  if (!MIXPREC_DIST_HAVE_GLOO) {                                                               \
    GTEST_SKIP() << "mixprec was built without Gloo's headers (gloo/context.h; Debian: "       \
                    "libgloo-dev), so mixprec::make_gloo_process_group throws: the distributed " \
                    "tests need it";                                                           \
  }
using Clock = std::chrono::steady_clock;

struct Rank {
  int exit_code = -1;   // -1: killed at the deadline or by a signal
  double seconds = 0;   // until it exited
  std::string out;      // rank<r>.out
  std::string err;      // rank<r>.err
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory per run, so the FileStore never sees a previous run's keys.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mixprec_dist_XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Starts `world` workers and waits until all exit (but `linger_rank`) or `deadline` passes; the
// ones left are killed.
std::vector<Rank> run_ranks(const std::string& scenario, int world, const std::string& reducer,
                            int timeout_ms, std::chrono::seconds deadline, int steps = 8,
                            int linger_rank = -1) {
  TempDir dir;
  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {MIXPREC_DIST_WORKER, "--scenario", scenario,
                                     "--rank", std::to_string(r), "--world", std::to_string(world),
                                     "--dir", dir.path().string(), "--reducer", reducer,
                                     "--timeout-ms", std::to_string(timeout_ms),
                                     "--steps", std::to_string(steps)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pids[r], argv[0], nullptr, nullptr, argv.data(), environ);
    EXPECT_EQ(rc, 0) << "posix_spawn " << argv[0];
  }
  std::vector<Rank> ranks(world);
  const auto start = Clock::now();
  int running = world;
  // A lingering rank (one that stalls on purpose) is killed once all the others have exited.
  auto waiting = [&] { return running - (linger_rank >= 0 && pids[linger_rank] > 0 ? 1 : 0); };
  while (waiting() > 0 && Clock::now() - start < deadline) {
    for (int r = 0; r < world; ++r) {
      int status = 0;
      if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      ranks[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      ranks[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
      pids[r] = -1;
      --running;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < world; ++r) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);  // only processes this test started
    waitpid(pids[r], nullptr, 0);
    ranks[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  for (int r = 0; r < world; ++r) {
    ranks[r].out = read_all(dir.path() / ("rank" + std::to_string(r) + ".out"));
    ranks[r].err = read_all(dir.path() / ("rank" + std::to_string(r) + ".err"));
  }
  return ranks;
}

struct StepLine {
  int applied = -1;
  std::string scale;
};

// "step <s> applied <0|1> scale <hex>" lines, in order.
std::vector<StepLine> steps_of(const std::string& out) {
  std::vector<StepLine> steps;
  std::istringstream in(out);
  std::string word;
  while (in >> word) {
    if (word != "step") continue;
    int s = 0;
    StepLine line;
    std::string k1, k2;
    in >> s >> k1 >> line.applied >> k2 >> line.scale;
    steps.push_back(line);
  }
  return steps;
}

std::string params_of(const std::string& out) {
  const auto pos = out.find("param");
  return pos == std::string::npos ? "" : out.substr(pos);
}

// The lines of `out` starting with `key` (a word), split into words, the key dropped.
std::vector<std::vector<std::string>> lines_of(const std::string& out, const std::string& key) {
  std::vector<std::vector<std::string>> found;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != key) continue;
    found.emplace_back();
    while (words >> word) found.back().push_back(word);
  }
  return found;
}

// Every rank exited 0 after `steps` steps (lines starting with `key`); on failure, every rank's
// error is shown. Callers wrap it in ASSERT_NO_FATAL_FAILURE: what follows reads those steps.
void expect_all_ok(const std::vector<Rank>& ranks, int steps, const std::string& key = "step") {
  bool ok = true;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::size_t seen = lines_of(ranks[r].out, key).size();
    EXPECT_EQ(ranks[r].exit_code, 0) << "rank " << r << " error: " << ranks[r].err;
    EXPECT_EQ(seen, static_cast<std::size_t>(steps)) << ranks[r].out;
    ok = ok && ranks[r].exit_code == 0 && seen == static_cast<std::size_t>(steps);
  }
  ASSERT_TRUE(ok) << "not every rank ran its " << steps << " steps (above)";
}

constexpr int kTimeoutMs = 20000;  // c10d timeout of the runs that should succeed
constexpr std::chrono::seconds kDeadline{60};

class DistributedTest : public ::testing::TestWithParam<int> {};

TEST_P(DistributedTest, EveryRankSkipsWhenOneRankSeesInf) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const auto ranks = run_ranks("skip", world, "world", kTimeoutMs, kDeadline);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 8));
  for (int r = 0; r < world; ++r) {
    const auto steps = steps_of(ranks[r].out);
    for (int s = 0; s < 8; ++s) {
      EXPECT_EQ(steps[s].applied, (s == 2 || s == 5) ? 0 : 1) << "rank " << r << " step " << s;
    }
  }
}

TEST_P(DistributedTest, ScalesEqualOnEveryRankAfterEveryUpdate) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const auto ranks = run_ranks("skip", world, "world", kTimeoutMs, kDeadline);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 8));
  const auto ref = steps_of(ranks[0].out);
  // init 1024, growth_interval 2: grows after two clean steps, backs off at steps 2 and 5.
  const char* expected[8] = {"0x1p+10", "0x1p+11", "0x1p+10", "0x1p+10",
                             "0x1p+11", "0x1p+10", "0x1p+10", "0x1p+11"};
  for (int s = 0; s < 8; ++s) EXPECT_EQ(ref[s].scale, expected[s]) << "step " << s;
  for (int r = 1; r < world; ++r) {
    const auto steps = steps_of(ranks[r].out);
    for (int s = 0; s < 8; ++s) {
      EXPECT_EQ(steps[s].scale, ref[s].scale) << "rank " << r << " step " << s;
    }
  }
}

// The control: without the reducer only the rank with the inf skips, and the scales part.
TEST_P(DistributedTest, WithoutReducerRanksDisagree) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const auto ranks = run_ranks("skip", world, "none", kTimeoutMs, kDeadline);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 8));
  EXPECT_EQ(steps_of(ranks[0].out)[2].applied, 1);
  EXPECT_EQ(steps_of(ranks[world - 1].out)[2].applied, 0);
  EXPECT_NE(steps_of(ranks[0].out)[2].scale, steps_of(ranks[world - 1].out)[2].scale);
}

TEST_P(DistributedTest, DataParallelParamsEqualOnEveryRank) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const int steps = 14;
  const auto ranks = run_ranks("ddp", world, "world", kTimeoutMs, kDeadline, steps);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, steps));
  const auto ref = steps_of(ranks[0].out);
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(ref[s].applied, (s == 3 || s == 7 || s == 11) ? 0 : 1) << "step " << s;
  }
  ASSERT_FALSE(params_of(ranks[0].out).empty());
  for (int r = 1; r < world; ++r) {
    // Bit-identical: same steps skipped, same scale, same averaged gradients.
    EXPECT_EQ(ranks[r].out, ranks[0].out) << "rank " << r;
  }
}

// The control: an inf after the gradient all-reduce, seen by one rank only, splits the ranks.
TEST_P(DistributedTest, DataParallelWithoutReducerDiverges) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const int steps = 10;
  const auto ranks = run_ranks("ddp", world, "none", kTimeoutMs, kDeadline, steps);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, steps));
  EXPECT_NE(params_of(ranks[world - 1].out), params_of(ranks[0].out));
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistributedTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

// 2 x 2 ranks; rank 3 sees an inf. Over its data pair then its pipeline pair, all four skip.
TEST(DistributedGroupsTest, ReducesOverEachGroupInTurn) {
  SKIP_WITHOUT_GLOO();
  const auto ranks = run_ranks("groups", 4, "world", kTimeoutMs, kDeadline, 3);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 3));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(steps_of(ranks[r].out)[1].applied, 0) << "rank " << r;
    EXPECT_EQ(steps_of(ranks[r].out)[2].applied, 1) << "rank " << r;
  }
}

TEST(DistributedGroupsTest, OneGroupOnlyReachesItsOwnRanks) {
  SKIP_WITHOUT_GLOO();
  const auto ranks = run_ranks("groups", 4, "dp", kTimeoutMs, kDeadline, 3);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 3));
  const int expected[4] = {1, 1, 0, 0};  // rank 3's data pair is {2, 3}
  for (int r = 0; r < 4; ++r) EXPECT_EQ(steps_of(ranks[r].out)[1].applied, expected[r]) << r;
}

// A rank dies (or stalls) between steps: the others fail with the reducer's error within the
// c10d timeout plus a margin, instead of hanging.
constexpr int kShortTimeoutMs = 4000;
constexpr double kBoundSeconds = 25;

void expect_survivors_fail_fast(const std::vector<Rank>& ranks, int victim, bool timeout_error) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == victim) continue;
    EXPECT_EQ(ranks[r].exit_code, 2) << "rank " << r << " should fail; out: " << ranks[r].out;
    EXPECT_LT(ranks[r].seconds, kBoundSeconds) << "rank " << r;
    EXPECT_NE(ranks[r].err.find("mixprec::distributed: all-reduce (MAX) of found_inf"),
              std::string::npos)
        << ranks[r].err;
    if (timeout_error) {
      EXPECT_NE(ranks[r].err.find("imed out"), std::string::npos) << ranks[r].err;
    }
  }
}

TEST(DistributedFailureTest, DeadRankMakesOthersFailInBoundedTime) {
  SKIP_WITHOUT_GLOO();
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    const auto ranks = run_ranks("die", world, "world", kShortTimeoutMs, std::chrono::seconds(40));
    EXPECT_EQ(ranks[1].exit_code, 3);
    expect_survivors_fail_fast(ranks, 1, false);
  }
}

TEST(DistributedFailureTest, StalledRankMakesOthersTimeOut) {
  SKIP_WITHOUT_GLOO();
  const auto ranks =
      run_ranks("stall", 2, "world", kShortTimeoutMs, std::chrono::seconds(40), 8, 1);
  expect_survivors_fail_fast(ranks, 1, true);
  EXPECT_EQ(ranks[1].exit_code, -1);  // still asleep, killed by run_ranks
}

// ---- FP8 amax reduction (fp8_amax_reduction) -------------------------------------------------

float parse_float(const std::string& word) { return std::strtof(word.c_str(), nullptr); }

std::string hex_of(float v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
  return buf;
}

// What the reduction must leave: per entry, the max over the ranks' amaxes, a NaN counting as
// +inf (NCCL's MAX would drop it; MS-AMP sends it as inf).
std::vector<std::string> expected_max(const std::vector<std::vector<std::string>>& locals) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < locals[0].size(); ++i) {
    float m = 0.0f;
    for (const auto& rank : locals) {
      float v = parse_float(rank[i]);
      if (std::isnan(v)) v = std::numeric_limits<float>::infinity();
      m = std::max(m, v);
    }
    out.push_back(hex_of(m));
  }
  return out;
}

// Checks every rank's reduced amaxes of every step against the max of all ranks' local amaxes.
void expect_reduced_amaxes(const std::vector<Rank>& ranks, int steps) {
  const int world = static_cast<int>(ranks.size());
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<std::string>> locals;
    for (const auto& rank : ranks) {
      std::vector<std::string> local = lines_of(rank.out, "local")[s];
      ASSERT_EQ(local.at(0), std::to_string(s));
      locals.emplace_back(local.begin() + 1, local.end());
    }
    const std::vector<std::string> want = expected_max(locals);
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> got = lines_of(ranks[r].out, "amax")[s];
      got.erase(got.begin());
      EXPECT_EQ(got, want) << "rank " << r << " step " << s;
    }
    // The cases the worker planted (dist_worker.cpp's fp8_amaxes), spelled out.
    std::vector<std::string> got = lines_of(ranks[0].out, "amax")[s];
    ASSERT_EQ(got.size(), 9u);
    EXPECT_EQ(got[1], hex_of(static_cast<float>(world + s))) << "the last rank's largest value";
    EXPECT_EQ(got[3], "0x0p+0") << "0 on every rank stays 0";
    EXPECT_EQ(got[4], "inf") << "a NaN on the last rank becomes +inf on every rank";
    EXPECT_EQ(got[5], "inf") << "an inf stays inf";
    EXPECT_EQ(got[6], "inf") << "a NaN with its sign bit set becomes +inf";
    EXPECT_EQ(got[7], "0x1.fffffep+127") << "FLT_MAX";
    EXPECT_EQ(got[8], hex_of(std::ldexp(static_cast<float>(s + 1), -149))) << "a subnormal";
  }
}

class Fp8AmaxReductionTest : public ::testing::TestWithParam<int> {};

TEST_P(Fp8AmaxReductionTest, EveryRankHoldsTheElementwiseMaxNanAsInf) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const int steps = 3;
  const auto ranks = run_ranks("fp8", world, "world", kTimeoutMs, kDeadline, steps);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, steps, "amax"));
  ASSERT_NO_FATAL_FAILURE(expect_reduced_amaxes(ranks, steps));
  for (int r = 0; r < world; ++r) {
    // Step 1 reduced a strided view: only its elements changed.
    const auto gaps = lines_of(ranks[r].out, "gaps");
    ASSERT_EQ(gaps.size(), 1u);
    for (std::size_t i = 1; i < gaps[0].size(); ++i) EXPECT_EQ(gaps[0][i], "-0x1.cp+2") << i;
  }
}

TEST_P(Fp8AmaxReductionTest, OneCollectivePerReductionNoneForNoAmaxes) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const int steps = 3;
  const auto ranks = run_ranks("fp8", world, "world", kTimeoutMs, kDeadline, steps);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, steps, "amax"));
  for (int r = 0; r < world; ++r) {
    const auto counts = lines_of(ranks[r].out, "collectives");
    for (int s = 0; s < steps; ++s) {
      EXPECT_EQ(counts[s], (std::vector<std::string>{std::to_string(s), "1"})) << "rank " << r;
    }
    EXPECT_EQ(lines_of(ranks[r].out, "empty"), (std::vector<std::vector<std::string>>{{"0"}}));
  }
}

// The control: without the reduction every rank keeps its own amaxes (and its NaN).
TEST_P(Fp8AmaxReductionTest, WithoutReductionRanksDisagree) {
  SKIP_WITHOUT_GLOO();
  const int world = GetParam();
  const auto ranks = run_ranks("fp8", world, "none", kTimeoutMs, kDeadline, 1);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 1, "amax"));
  EXPECT_NE(lines_of(ranks[0].out, "amax"), lines_of(ranks[world - 1].out, "amax"));
  EXPECT_EQ(lines_of(ranks[world - 1].out, "amax")[0].at(4), "nan");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Fp8AmaxReductionTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

// 2 x 2 ranks: over the data pair, then the pipeline pair, every rank gets all four's max.
TEST(Fp8AmaxReductionGroupsTest, ReducesOverEachGroupInTurn) {
  SKIP_WITHOUT_GLOO();
  const auto ranks = run_ranks("fp8_groups", 4, "world", kTimeoutMs, kDeadline, 2);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 2, "amax"));
  ASSERT_NO_FATAL_FAILURE(expect_reduced_amaxes(ranks, 2));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(lines_of(ranks[r].out, "collectives")[0], (std::vector<std::string>{"0", "1", "1"}))
        << "rank " << r;
  }
}

// Over the data pair alone: ranks {0, 1} and {2, 3} each hold their own pair's max.
TEST(Fp8AmaxReductionGroupsTest, OneGroupOnlyReachesItsOwnRanks) {
  SKIP_WITHOUT_GLOO();
  const auto ranks = run_ranks("fp8_groups", 4, "dp", kTimeoutMs, kDeadline, 1);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 1, "amax"));
  for (int pair = 0; pair < 2; ++pair) {
    std::vector<std::vector<std::string>> locals;
    for (int r = 2 * pair; r < 2 * pair + 2; ++r) {
      const auto local = lines_of(ranks[r].out, "local")[0];
      locals.emplace_back(local.begin() + 1, local.end());
    }
    for (int r = 2 * pair; r < 2 * pair + 2; ++r) {
      auto got = lines_of(ranks[r].out, "amax")[0];
      got.erase(got.begin());
      EXPECT_EQ(got, expected_max(locals)) << "rank " << r;
    }
  }
  EXPECT_NE(lines_of(ranks[0].out, "amax"), lines_of(ranks[3].out, "amax"));
}

#if MIXPREC_DIST_HAVE_FP8
// fp8::Linear (delayed, HYBRID, history 4, margin 0) on 2 ranks with different data, its amaxes
// reduced over the world. The expected buffers come from the ranks' own measurements ("local
// <it> <input> <weight> <grad_output>", torch ops on the tensors the module casts): per
// iteration the max over the ranks goes into slot 0, then the delayed rule runs here (TE's
// transformer_engine/pytorch/fp8.py: max of the history, scale = fp8_max / amax, the old scale
// for a 0 or non-finite amax, FLT_MAX for an infinite scale; roll by one, slot 0 zeroed).
struct DelayedBuffers {
  std::vector<std::string> history, scale, scale_inv;
};

DelayedBuffers expected_delayed(const std::vector<Rank>& ranks, int iterations) {
  constexpr int kHistory = 4, kColumns = 3;
  const float fp8_max[kColumns] = {448.0f, 448.0f, 57344.0f};  // E4M3, E4M3, E5M2 (HYBRID)
  std::vector<float> history(kHistory * kColumns, 0.0f);
  std::vector<float> scale(kColumns, 1.0f);
  for (int it = 0; it < iterations; ++it) {
    for (int c = 0; c < kColumns; ++c) {
      float m = 0.0f;
      for (const auto& rank : ranks) {
        m = std::max(m, parse_float(lines_of(rank.out, "local")[it].at(1 + c)));
      }
      history[c] = m;
    }
    for (int c = 0; c < kColumns; ++c) {
      float amax = 0.0f;
      for (int i = 0; i < kHistory; ++i) amax = std::max(amax, history[i * kColumns + c]);
      if (amax > 0.0f && std::isfinite(amax)) {
        float s = fp8_max[c] / amax;
        scale[c] = std::isinf(s) ? std::numeric_limits<float>::max() : s;
      }
      const float current = history[c];
      for (int i = 0; i + 1 < kHistory; ++i) {
        history[i * kColumns + c] = history[(i + 1) * kColumns + c];
      }
      history[(kHistory - 1) * kColumns + c] = current;
      history[c] = 0.0f;
    }
  }
  DelayedBuffers out;
  for (float v : history) out.history.push_back(hex_of(v));
  for (float v : scale) {
    out.scale.push_back(hex_of(v));
    out.scale_inv.push_back(hex_of(1.0f / v));
  }
  return out;
}

TEST(Fp8LinearDistributedTest, DelayedScalesEqualOnEveryRankFromTheMaxAmaxes) {
  SKIP_WITHOUT_GLOO();
  const int iterations = 6;  // more than the history: old amaxes leave the window
  const auto ranks = run_ranks("fp8_linear", 2, "world", kTimeoutMs, kDeadline, iterations);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, iterations, "local"));
  const DelayedBuffers want = expected_delayed(ranks, iterations);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(lines_of(ranks[r].out, "history").at(0), want.history) << "rank " << r;
    EXPECT_EQ(lines_of(ranks[r].out, "scale").at(0), want.scale) << "rank " << r;
    EXPECT_EQ(lines_of(ranks[r].out, "scale_inv").at(0), want.scale_inv) << "rank " << r;
  }
  // Not vacuous: the ranks' own amaxes differed, in every column at some iteration.
  for (int c = 1; c <= 3; ++c) {
    bool differ = false;
    for (int it = 0; it < iterations; ++it) {
      differ = differ ||
               lines_of(ranks[0].out, "local")[it][c] != lines_of(ranks[1].out, "local")[it][c];
    }
    EXPECT_TRUE(differ) << "column " << c;
  }
}

// A NaN planted on one rank (rank 1's input of iteration 2, dist_worker.cpp's kNanAt). With NaNs
// propagated it reaches the reduction, which sends it as inf: every rank keeps its old input and
// grad_output scales at the next update, and the inf stays in every rank's window. With TE's
// default the NaN is skipped where it is cast: every rank updates from the other amaxes. Either
// way the ranks agree on every scale of every iteration.
TEST(Fp8LinearDistributedTest, ANanOnOneRankKeepsEveryRanksScaleOrIsSkippedEverywhere) {
  SKIP_WITHOUT_GLOO();
  const int iterations = 5, nan_at = 2;
  for (const std::string scenario : {"fp8_linear_nan", "fp8_linear_nan_te"}) {
    SCOPED_TRACE(scenario);
    const bool propagate = scenario == "fp8_linear_nan";
    const auto ranks = run_ranks(scenario, 2, "world", kTimeoutMs, kDeadline, iterations);
    ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, iterations, "local"));
    const auto scales0 = lines_of(ranks[0].out, "scales"),
               scales1 = lines_of(ranks[1].out, "scales");
    ASSERT_EQ(scales0.size(), static_cast<std::size_t>(iterations));
    EXPECT_EQ(scales0, scales1) << "the ranks' scales differ";
    EXPECT_EQ(lines_of(ranks[0].out, "history"), lines_of(ranks[1].out, "history"));
    // Rank 1 saw the NaN (its own measurement, torch ops), rank 0 did not.
    EXPECT_TRUE(std::isnan(parse_float(lines_of(ranks[1].out, "local")[nan_at][1])));
    EXPECT_FALSE(std::isnan(parse_float(lines_of(ranks[0].out, "local")[nan_at][1])));
    // The update after it (the scales of iteration nan_at + 1), input (1) and grad_output (3).
    for (int c : {1, 3}) {
      const bool kept = scales0[nan_at + 1][c] == scales0[nan_at][c];
      if (propagate) EXPECT_TRUE(kept) << "column " << c;
    }
    // At the end the window's slot 1 holds iteration nan_at (three updates since): inf, or the
    // finite max of the amaxes the ranks cast.
    const std::vector<std::string> history = lines_of(ranks[0].out, "history").at(0);
    const float input_amax = parse_float(history.at(1 * 3 + 0));
    if (propagate) {
      EXPECT_TRUE(std::isinf(input_amax)) << history.at(3);
    } else {
      EXPECT_TRUE(std::isfinite(input_amax) && input_amax > 0.0f) << history.at(3);
    }
  }
}

// The control: without the reduction each rank's scales follow its own amaxes.
TEST(Fp8LinearDistributedTest, WithoutReductionScalesDiffer) {
  SKIP_WITHOUT_GLOO();
  const auto ranks = run_ranks("fp8_linear", 2, "none", kTimeoutMs, kDeadline, 3);
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(ranks, 3, "local"));
  EXPECT_NE(lines_of(ranks[0].out, "scale").at(0), lines_of(ranks[1].out, "scale").at(0));
}

// The NVFP4 recipe's per-tensor amax with the recipe's amax reduction (dist_worker.cpp,
// run_nvfp4_linear): every rank's forward is the one cast with the max of the ranks' input
// amaxes, and, the ranks' inputs having different magnitudes, not the one with rank 0's own; the
// control without the reduction is each rank's own.
TEST(Nvfp4DistributedTest, PerTensorAmaxIsTheMaxOverTheRanks) {
  SKIP_WITHOUT_GLOO();
  for (const std::string reducer : {"world", "none"}) {
    SCOPED_TRACE(reducer);
    const auto ranks = run_ranks("nvfp4_linear", 2, reducer, kTimeoutMs, kDeadline, 1);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(ranks[r].exit_code, 0) << "rank " << r << ": " << ranks[r].err;
      const std::vector<std::string> match = lines_of(ranks[r].out, "match").at(0);
      ASSERT_EQ(match.size(), 2u) << ranks[r].out;  // global, local
      if (reducer == "world") {
        EXPECT_EQ(match[0], "1") << "rank " << r << " did not cast with the max amax";
      } else {
        EXPECT_EQ(match[1], "1") << "rank " << r << " did not cast with its own amax";
      }
    }
    // Rank 0's input is the smaller: its global and local casts differ.
    EXPECT_NE(lines_of(ranks[0].out, "match").at(0)[0], lines_of(ranks[0].out, "match").at(0)[1]);
    EXPECT_LT(parse_float(lines_of(ranks[0].out, "amax").at(0).at(0)),
              parse_float(lines_of(ranks[1].out, "amax").at(0).at(0)));
  }
}
#endif  // MIXPREC_DIST_HAVE_FP8

}  // namespace
