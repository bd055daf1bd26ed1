// Multi-process tests of mixprec::distributed: starts 2 or 4 dist_worker processes (Gloo over a
// FileStore in a fresh temp directory, loopback only), waits for them with a deadline, and
// compares what every rank saw. No LibTorch here: the ranks do the training.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// Every rank exited 0 after `steps` steps; on failure, every rank's error is shown. Callers wrap
// it in ASSERT_NO_FATAL_FAILURE: what follows reads those steps.
void expect_all_ok(const std::vector<Rank>& ranks, int steps) {
  bool ok = true;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].exit_code, 0) << "rank " << r << " error: " << ranks[r].err;
    EXPECT_EQ(steps_of(ranks[r].out).size(), static_cast<std::size_t>(steps)) << ranks[r].out;
    ok = ok && ranks[r].exit_code == 0 &&
         steps_of(ranks[r].out).size() == static_cast<std::size_t>(steps);
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

}  // namespace
