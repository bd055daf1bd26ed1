// Gradient clipping across hosts (mixprec::distributed::grad_norm_reducer and clip_grad_norm_):
// each test makes 3 network hosts, i.e. Linux network namespaces joined by veth pairs to a bridge
// in a fourth ("switch") namespace, each with its own address 10.77.0.<r+1>, and starts one
// multihost_worker per host. The ranks rendezvous over a c10d TCPStore that rank 0 serves at its
// address and reduce over Gloo bound to their own. No LibTorch here: the ranks train and print,
// and this driver compares what they printed. Needs root and iproute2's `ip` (skips otherwise,
// saying why; tests/expected_skips.txt allows the skip only when not root). The namespaces are
// named mpxd-<pid>-*, deleted when a test ends, whatever its outcome, and ones left by a driver
// that was killed are deleted by the next run.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 3;
constexpr int kSteps = 6;
constexpr int kBadStep = 2;  // the worker's default: rank 1 puts an inf/NaN into its shard's grad
constexpr double kMaxNorm = 0.5;  // multihost_worker.cpp's

// ---- network namespaces ----------------------------------------------------------------------

// iproute2's ip, where Debian puts it (root's PATH has /usr/sbin; CTest's may not).
std::string ip_binary() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// Why the tests cannot run here ("" when they can).
std::string why_not() {
  if (!MIXPREC_DIST_HAVE_GLOO) {
    return "mixprec was built without Gloo's headers (gloo/context.h; Debian: libgloo-dev), so "
           "make_gloo_process_group throws";
  }
  if (geteuid() != 0) {
    return "not root: the ranks run on separate network hosts, Linux network namespaces, which "
           "need root (CI runs as root)";
  }
  // No mount at "/" in /proc/self/mountinfo (5th field): a chroot, as tests/expected_skips.txt's
  // `chroot` condition (scripts/lib/check_skips.py) decides it.
  bool root_mounted = false;
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i < 5 && fields >> field; ++i) {
    }
    root_mounted = root_mounted || field == "/";
  }
  if (mountinfo.is_open() && !root_mounted) {
    return "in a chroot (as scripts/debian13_stage.sh runs the tests): its / is no mount point, "
           "so `ip netns add` cannot make a network namespace (\"mount --make-rslave /\" "
           "fails); the Debian 12 and current-PyTorch stages run these tests";
  }
  if (ip_binary().empty()) {
    return "no `ip` (Debian: iproute2, which scripts/install_deps.sh installs): the network "
           "namespaces are made with it";
  }
  return "";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `ip <args>`; "" on success, else the command and what it printed.
std::string ip(const std::string& args) {
  char log[] = "/tmp/mixprec_ip_XXXXXX";
  const int fd = mkstemp(log);
  if (fd >= 0) close(fd);
  const std::string command = ip_binary() + " " + args + " >" + log + " 2>&1";
  const int rc = std::system(command.c_str());
  std::string output = read_all(log);
  unlink(log);
  if (rc == 0) return "";
  return "`ip " + args + "` failed (" + std::to_string(rc) + "): " + output;
}

constexpr const char* kPrefix = "mpxd-";

// Namespaces named mpxd-<pid>-* whose driver is gone (killed at CTest's timeout, say).
void delete_stale_namespaces() {
  DIR* dir = opendir("/run/netns");
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  closedir(dir);
  for (const auto& name : stale) ip("netns delete " + name);
}

// kWorld hosts: namespaces mpxd-<pid>-r<i> with eth0 at 10.77.0.<i+1>/24, each joined by a veth
// pair to bridge br0 in mpxd-<pid>-sw. Nothing is added to the machine's own namespace. Deleting
// a namespace deletes the veth ends in it, and with them their peers.
class Hosts {
 public:
  explicit Hosts(int n) {
    delete_stale_namespaces();
    const std::string base = kPrefix + std::to_string(getpid()) + "-";
    switch_ = base + "sw";
    for (int i = 0; i < n; ++i) hosts_.push_back(base + "r" + std::to_string(i));
    error_ = make();
  }
  ~Hosts() {
    for (const auto& name : created_) ip("netns delete " + name);
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  const std::string& error() const { return error_; }
  int size() const { return static_cast<int>(hosts_.size()); }
  const std::string& name(int r) const { return hosts_[r]; }
  std::string address(int r) const { return "10.77.0." + std::to_string(r + 1); }

 private:
  std::string add(const std::string& name) {
    std::string e = ip("netns add " + name);
    if (e.empty()) created_.push_back(name);
    return e;
  }
  std::string make() {
    std::vector<std::string> steps;
    if (auto e = add(switch_); !e.empty()) return e;
    steps = {"-n " + switch_ + " link add br0 type bridge", "-n " + switch_ + " link set br0 up"};
    for (const auto& s : steps) {
      if (auto e = ip(s); !e.empty()) return e;
    }
    for (int i = 0; i < size(); ++i) {
      if (auto e = add(hosts_[i]); !e.empty()) return e;
      const std::string port = "v" + std::to_string(i);
      steps = {
          "-n " + switch_ + " link add " + port + " type veth peer name eth0 netns " + hosts_[i],
          "-n " + switch_ + " link set " + port + " master br0",
          "-n " + switch_ + " link set " + port + " up",
          "-n " + hosts_[i] + " addr add " + address(i) + "/24 dev eth0",
          "-n " + hosts_[i] + " link set eth0 up",
          "-n " + hosts_[i] + " link set lo up",
      };
      for (const auto& s : steps) {
        if (auto e = ip(s); !e.empty()) return e;
      }
    }
    return "";
  }

  std::string switch_;
  std::vector<std::string> hosts_;
  std::vector<std::string> created_;
  std::string error_;
};

// Skips without root, ip or Gloo; otherwise makes the hosts or fails saying why.
#define MAKE_HOSTS(hosts)                                                   \
  if (const std::string why = why_not(); !why.empty()) GTEST_SKIP() << why; \
  Hosts hosts(kWorld);                                                      \
  ASSERT_EQ(hosts.error(), "") << "could not make the network namespaces as root"

// ---- ranks -----------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mixprec_multihost_XXXXXX").string();
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

// Starts `args` in network namespace `netns` ("" for the driver's own). -1 if it could not.
pid_t spawn(const std::string& netns, const std::vector<std::string>& args) {
  int fd = -1;
  if (!netns.empty()) {
    fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
  }
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (fd >= 0 && setns(fd, CLONE_NEWNET) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (fd >= 0) close(fd);
  return pid;
}

struct Rank {
  int exit_code = -1;  // -1: ended by a signal (or killed at the deadline)
  int signal = 0;
  double seconds = 0;  // from the start until it ended
  std::string out, err;
};

struct Ranks {
  std::vector<Rank> ranks;
  double kill_seconds = -1;  // when the victim was killed or cut off (die)
};

// Starts one worker per host and waits until all end or `deadline` passes (the rest are killed).
// `victim` >= 0: as soon as that rank says it is mid-step (rank<v>.mid) it is SIGKILLed, or with
// `partition` its host is cut off the network (its eth0 down: no reset reaches the others, who
// must time out) and it is killed once the others have ended.
Ranks run_ranks(const Hosts& hosts, const fs::path& dir, const std::vector<std::string>& extra,
                int timeout_ms = 20000, int victim = -1, bool partition = false,
                std::chrono::seconds deadline = std::chrono::seconds(60)) {
  const int world = hosts.size();
  std::vector<pid_t> pids(world, -1);
  const auto start = Clock::now();
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {MIXPREC_MULTIHOST_WORKER};
    auto pass = [&](const char* key, const std::string& value) {
      args.push_back(key);
      args.push_back(value);
    };
    pass("--rank", std::to_string(r));
    pass("--world", std::to_string(world));
    pass("--dir", dir.string());
    pass("--master", hosts.address(0));  // rank 0's host serves the TCPStore
    pass("--ip", hosts.address(r));      // Gloo binds to this rank's own address
    pass("--timeout-ms", std::to_string(timeout_ms));
    pass("--steps", std::to_string(kSteps));
    args.insert(args.end(), extra.begin(), extra.end());
    pids[r] = spawn(hosts.name(r), args);
    EXPECT_GT(pids[r], 0) << "could not start rank " << r << " in " << hosts.name(r);
  }
  Ranks run;
  run.ranks.resize(world);
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  // A cut-off victim sleeps on: it is not waited for.
  auto waiting = [&] { return running - (partition && pids[victim] > 0 ? 1 : 0); };
  while (waiting() > 0 && Clock::now() - start < deadline) {
    if (victim >= 0 && pids[victim] > 0 && run.kill_seconds < 0 &&
        fs::exists(dir / ("rank" + std::to_string(victim) + ".mid"))) {
      if (partition) {
        const std::string e = ip("-n " + hosts.name(victim) + " link set eth0 down");
        EXPECT_EQ(e, "");
      } else {
        kill(pids[victim], SIGKILL);  // only processes this test started
      }
      run.kill_seconds = since();
    }
    for (int r = 0; r < world; ++r) {
      int status = 0;
      if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      run.ranks[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      run.ranks[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      run.ranks[r].seconds = since();
      pids[r] = -1;
      --running;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);
    int status = 0;
    waitpid(pids[r], &status, 0);
    run.ranks[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    run.ranks[r].seconds = since();
  }
  for (int r = 0; r < world; ++r) {
    run.ranks[r].out = read_all(dir / ("rank" + std::to_string(r) + ".out"));
    run.ranks[r].err = read_all(dir / ("rank" + std::to_string(r) + ".err"));
  }
  return run;
}

// The lines of `out` starting with the word `key`, split into words, the key dropped.
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

// The value of `key` in a line of words "... key value ...".
std::string field(const std::vector<std::string>& words, const std::string& key) {
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == key) return words[i + 1];
  }
  return "?";
}

double parse(const std::string& word) { return std::strtod(word.c_str(), nullptr); }

// Every rank exited 0 with kSteps step lines, each on a network namespace of its own (not the
// driver's) at its own address.
void expect_all_ok(const Ranks& run, const Hosts& hosts) {
  bool ok = true;
  std::vector<std::string> namespaces;
  char own[256] = {};
  ASSERT_GT(readlink("/proc/self/ns/net", own, sizeof own - 1), 0);
  for (int r = 0; r < static_cast<int>(run.ranks.size()); ++r) {
    const Rank& rank = run.ranks[r];
    EXPECT_EQ(rank.exit_code, 0) << "rank " << r << " error: " << rank.err;
    const std::size_t seen = lines_of(rank.out, "step").size();
    EXPECT_EQ(seen, static_cast<std::size_t>(kSteps)) << "rank " << r << ":\n" << rank.out;
    ok = ok && rank.exit_code == 0 && seen == static_cast<std::size_t>(kSteps);
    const auto host = lines_of(rank.out, "host");
    ASSERT_EQ(host.size(), 1u) << rank.out;
    EXPECT_EQ(host[0].at(1), hosts.address(r));
    EXPECT_NE(host[0].at(0), own) << "rank " << r << " ran in the driver's network namespace";
    for (const auto& other : namespaces) EXPECT_NE(host[0].at(0), other) << "rank " << r;
    namespaces.push_back(host[0].at(0));
  }
  ASSERT_TRUE(ok) << "not every rank ran its " << kSteps << " steps (above)";
}

// The floats of a "trunk"/"shard"/"refshard" line.
std::vector<double> floats(const std::vector<std::string>& words, std::size_t skip = 0) {
  std::vector<double> out;
  for (std::size_t i = skip; i < words.size(); ++i) out.push_back(parse(words[i]));
  return out;
}

// Each shard as trained on its rank against the reference's replay of it on rank 0: equal to a
// few float32 ulps (the norm's double sums add in another order there; the clip coefficient, so
// the update, can differ in its last bit). Returns how many shards were bit-identical.
int expect_shards_match_reference(const Ranks& run) {
  int identical = 0;
  const auto refshards = lines_of(run.ranks[0].out, "refshard");
  EXPECT_EQ(refshards.size(), static_cast<std::size_t>(kWorld));
  for (int r = 0; r < kWorld && r < static_cast<int>(refshards.size()); ++r) {
    EXPECT_EQ(refshards[r].at(0), std::to_string(r));
    const auto shard = lines_of(run.ranks[r].out, "shard");
    EXPECT_EQ(shard.size(), 1u);
    if (shard.empty()) continue;
    const std::vector<double> got = floats(shard[0]), want = floats(refshards[r], 1);
    EXPECT_EQ(got.size(), want.size()) << "shard " << r;
    for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << "shard " << r << " " << i;
    }
    identical += std::vector<std::string>(refshards[r].begin() + 1, refshards[r].end()) == shard[0];
  }
  return identical;
}

void expect_near_norm(const std::string& got, const std::string& want, const std::string& where) {
  const double g = parse(got), w = parse(want);
  EXPECT_TRUE(std::isfinite(g) && std::isfinite(w)) << where << ": " << got << " vs " << want;
  EXPECT_NEAR(g, w, 1e-6 * w) << where << ": rank " << got << ", reference " << want;
}

// ---- GradScaler::clip_grad_norm_ with grad_norm_reducer ------------------------------------

struct ScalerCase {
  const char* optim;  // fused: mixprec::optim::AdamW (its own pass); torch: torch::optim::AdamW
  const char* norm_type;
};

void PrintTo(const ScalerCase& c, std::ostream* os) { *os << c.optim << " p=" << c.norm_type; }

class MultiHostScalerClipTest : public ::testing::TestWithParam<ScalerCase> {};

// Per step every rank returns the same norm bit for bit, the norm of all shards together (rank
// 0's replay of every shard in one process), takes the same skip decision (rank 1's inf/NaN at
// step 2 skips every rank's shard step; the trunk, whose grads are finite, steps) and ends with
// the same scale; the replicated trunk stays bit-identical and each shard ends as the replay's.
TEST_P(MultiHostScalerClipTest, EveryRankClipsByTheGlobalNormAndSkipsTogether) {
  MAKE_HOSTS(hosts);
  TempDir dir;
  const bool inf_norm = std::string(GetParam().norm_type) == "inf";
  const auto start = Clock::now();
  const Ranks run = run_ranks(
      hosts, dir.path(),
      {"--scenario", "scaler", "--optim", GetParam().optim, "--norm-type", GetParam().norm_type});
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(run, hosts));
  const auto ref = lines_of(run.ranks[0].out, "ref");
  ASSERT_EQ(ref.size(), static_cast<std::size_t>(kSteps));
  bool clipped = false;
  int exact = 0;
  for (int s = 0; s < kSteps; ++s) {
    const auto step0 = lines_of(run.ranks[0].out, "step")[s];
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(lines_of(run.ranks[r].out, "step")[s], step0) << "rank " << r << " step " << s;
    }
    const bool bad = s == kBadStep;
    EXPECT_EQ(field(step0, "applied"), bad ? "0" : "1") << "step " << s;
    EXPECT_EQ(field(step0, "trunk"), "1") << "step " << s;
    EXPECT_EQ(field(ref[s], "applied"), field(step0, "applied")) << "step " << s;
    EXPECT_EQ(field(ref[s], "scale"), field(step0, "scale")) << "step " << s;
    if (bad) {
      // One rank's inf (p = 2) or NaN (p = inf, sent as +inf by the MAX) is +inf everywhere.
      EXPECT_EQ(field(step0, "norm"), "inf");
      EXPECT_EQ(field(ref[s], "norm"), inf_norm ? "nan" : "inf");  // one process keeps the NaN
    } else {
      expect_near_norm(field(step0, "norm"), field(ref[s], "norm"), "step " + std::to_string(s));
      exact += field(step0, "norm") == field(ref[s], "norm");
      clipped = clipped || parse(field(step0, "norm")) > kMaxNorm;
    }
  }
  EXPECT_TRUE(clipped) << "no step clipped: the test would not see a wrong coefficient";
  const auto trunk0 = lines_of(run.ranks[0].out, "trunk");
  ASSERT_EQ(trunk0.size(), 1u);
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_EQ(lines_of(run.ranks[r].out, "trunk"), trunk0) << "the replicated trunk, rank " << r;
  }
  const int identical = expect_shards_match_reference(run);
  std::printf(
      "norms bit-identical to the one-process replay at %d of %d clean steps; shards "
      "bit-identical: %d of %d; %.1f s\n",
      exact, kSteps - 1, identical, kWorld,
      std::chrono::duration<double>(Clock::now() - start).count());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, MultiHostScalerClipTest,
                         ::testing::Values(ScalerCase{"fused", "2"}, ScalerCase{"torch", "2"},
                                           ScalerCase{"fused", "inf"}, ScalerCase{"torch", "inf"},
                                           // GradScaler's other-p path: unscale_, then the norm
                                           ScalerCase{"fused", "1"}, ScalerCase{"torch", "3"}),
                         [](const auto& info) {
                           return std::string(info.param.optim) + "_p" + info.param.norm_type;
                         });

// The control: without the grad norm reducer each rank clips by its own shard's norm, only rank
// 1 skips step 2, the scales part, and the replicated trunk parts with them.
TEST(MultiHostScalerClipControlTest, WithoutTheReducerRanksDisagree) {
  MAKE_HOSTS(hosts);
  TempDir dir;
  const Ranks run = run_ranks(hosts, dir.path(), {"--scenario", "scaler", "--reducer", "none"});
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(run, hosts));
  const auto steps0 = lines_of(run.ranks[0].out, "step");
  const auto steps1 = lines_of(run.ranks[1].out, "step");
  EXPECT_NE(field(steps0[0], "norm"), field(steps1[0], "norm"));
  EXPECT_EQ(field(steps0[kBadStep], "applied"), "1");
  EXPECT_EQ(field(steps1[kBadStep], "applied"), "0");
  EXPECT_NE(field(steps0[kBadStep], "scale"), field(steps1[kBadStep], "scale"));
  EXPECT_NE(lines_of(run.ranks[0].out, "trunk"), lines_of(run.ranks[1].out, "trunk"));
}

// ---- mixprec::distributed::clip_grad_norm_ (no scaler) ---------------------------------------

class MultiHostPlainClipTest : public ::testing::TestWithParam<const char*> {};

// Every rank gets the same norm bit for bit, the norm of all shards together; a non-finite one
// on rank 1 is non-finite on every rank (NaN as NaN for p = inf: the flag beside the MAX), and
// with error_if_nonfinite every rank throws PyTorch's message; the shards end as the replay's.
TEST_P(MultiHostPlainClipTest, EveryRankGetsTheNormOfAllShards) {
  MAKE_HOSTS(hosts);
  TempDir dir;
  const std::string p = GetParam();
  const Ranks run = run_ranks(hosts, dir.path(), {"--scenario", "plain", "--norm-type", p});
  ASSERT_NO_FATAL_FAILURE(expect_all_ok(run, hosts));
  // norm_type 0, -1, -inf and NaN, and a reducer tensor of 3 elements, throw (before any
  // collective: the runs went on).
  const auto rejects = lines_of(run.ranks[0].out, "rejects");
  ASSERT_EQ(rejects.size(), 5u) << run.ranks[0].out;
  for (std::size_t i = 0; i < 4; ++i) {
    std::string text;
    for (std::size_t w = 1; w < rejects[i].size(); ++w) text += (w > 1 ? " " : "") + rejects[i][w];
    EXPECT_EQ(text, "mixprec::distributed::clip_grad_norm_: norm_type must be 2") << rejects[i][0];
  }
  EXPECT_EQ(rejects[4].at(1), "mixprec::distributed::grad_norm_reducer:");
  EXPECT_EQ(rejects[4].at(2), "expects");
  const auto ref = lines_of(run.ranks[0].out, "ref");
  ASSERT_EQ(ref.size(), static_cast<std::size_t>(kSteps));
  bool clipped = false;
  for (int s = 0; s < kSteps; ++s) {
    const auto step0 = lines_of(run.ranks[0].out, "step")[s];
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(lines_of(run.ranks[r].out, "step")[s], step0) << "rank " << r << " step " << s;
    }
    if (s == kBadStep) {
      const std::string want = p == "inf" ? "nan" : "inf";
      EXPECT_EQ(field(step0, "norm"), want);
      EXPECT_EQ(field(ref[s], "norm"), want);
    } else if (s == kBadStep + 2) {
      const std::string message =
          "The total norm of order " + std::string(p == "inf" ? "inf" : p + ".0") + " for";
      EXPECT_EQ(step0.at(1), "nonfinite");
      EXPECT_EQ(ref[s].at(1), "nonfinite");
      for (const auto& words : {step0, ref[s]}) {
        std::string text;
        for (std::size_t i = 2; i < words.size(); ++i) text += (i > 2 ? " " : "") + words[i];
        EXPECT_EQ(text.rfind(message, 0), 0u) << text;
      }
    } else {
      expect_near_norm(field(step0, "norm"), field(ref[s], "norm"), "step " + std::to_string(s));
      clipped = clipped || parse(field(step0, "norm")) > kMaxNorm;
    }
  }
  EXPECT_TRUE(clipped) << "no step clipped: the test would not see a wrong coefficient";
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_EQ(lines_of(run.ranks[r].out, "trunk"), lines_of(run.ranks[0].out, "trunk"))
        << "rank " << r;
  }
  expect_shards_match_reference(run);
}

INSTANTIATE_TEST_SUITE_P(NormTypes, MultiHostPlainClipTest, ::testing::Values("2", "inf", "1", "3"),
                         [](const auto& info) { return std::string("p") + info.param; });

// ---- a peer killed mid-step ----------------------------------------------------------------

// Rank 2 is SIGKILLed in step 3 (or its host drops off the network), after the trunk's
// all-reduce, while the others wait in the clip's: they fail with the reducer's c10::Error (group,
// backend, rank) within the process group's timeout of 5 s, without hanging; the checkpoint each
// rank saved after every step (mixprec::save_checkpoint) loads whole and holds step 2's shard and
// scale.
class MultiHostFailureTest : public ::testing::TestWithParam<bool> {};

TEST_P(MultiHostFailureTest, LostPeerFailsTheOthersInTimeAndCheckpointsLoad) {
  MAKE_HOSTS(hosts);
  TempDir dir;
  const bool partition = GetParam();
  constexpr int kTimeoutMs = 5000, kVictim = 2, kKillStep = 3;
  const Ranks run = run_ranks(hosts, dir.path(),
                              {"--scenario", "die", "--victim", std::to_string(kVictim),
                               "--kill-step", std::to_string(kKillStep)},
                              kTimeoutMs, kVictim, partition, std::chrono::seconds(40));
  ASSERT_GE(run.kill_seconds, 0) << "rank 2 never reached the kill point: " << run.ranks[2].err;
  EXPECT_EQ(run.ranks[kVictim].signal, SIGKILL);
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    const Rank& rank = run.ranks[r];
    EXPECT_EQ(rank.exit_code, 2) << "rank " << r << " should fail; out:\n" << rank.out;
    const double after = rank.seconds - run.kill_seconds;
    if (partition) {
      // Nothing tells the others: only the timeout ends their wait, which began before the cut.
      EXPECT_GT(after, kTimeoutMs / 1000.0 - 1.5) << "rank " << r;
      EXPECT_NE(rank.err.find("imed out"), std::string::npos) << rank.err;
    }
    std::printf("rank %d failed %.2f s after the fault: %s\n", r, after,
                rank.err.substr(0, rank.err.find('\n')).c_str());
    EXPECT_LT(after, kTimeoutMs / 1000.0 + 2.0) << "rank " << r;
    const std::string want =
        "mixprec::distributed: all-reduce (SUM) of the grad norm's power and "
        "found_inf over process group 0 of 1 (gloo, rank " +
        std::to_string(r) + " of 3) failed";
    EXPECT_NE(rank.err.find(want), std::string::npos) << rank.err;
  }
  // Each rank's last checkpoint: that of step kKillStep - 1 (the victim's too).
  for (int r = 0; r < kWorld; ++r) {
    const auto saved = lines_of(run.ranks[r].out, "saved");
    ASSERT_EQ(saved.size(), static_cast<std::size_t>(kKillStep)) << run.ranks[r].out;
    ASSERT_EQ(saved.back().at(0), std::to_string(kKillStep - 1));
    const pid_t pid = spawn("", {MIXPREC_MULTIHOST_WORKER, "--scenario", "load", "--rank",
                                 std::to_string(r), "--dir", dir.path().string(), "--ckpt",
                                 (dir.path() / ("ckpt" + std::to_string(r) + ".pt")).string()});
    ASSERT_GT(pid, 0);
    int status = 0;
    waitpid(pid, &status, 0);
    const std::string loaded = read_all(dir.path() / ("load" + std::to_string(r) + ".out"));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << read_all(dir.path() / ("load" + std::to_string(r) + ".err"));
    const auto got = lines_of(loaded, "loaded");
    ASSERT_EQ(got.size(), 1u) << loaded;
    EXPECT_EQ(got[0], std::vector<std::string>(saved.back().begin() + 1, saved.back().end()))
        << "rank " << r << "'s checkpoint";
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, MultiHostFailureTest, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "HostCutOff" : "Sigkill");
});

}  // namespace
