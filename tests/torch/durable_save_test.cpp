// mixprec's saves (Note [Durable saves], src/torch/checkpoint/file_writer.h): planted links, modes,
// a full disk, the order of fsync and rename, a writer killed mid-save, concurrent writers. It
// interposes fsync() and rename() for the whole test executable (defined below, each passing the
// call on to libc's unless a test asks it to fail), to see and fail them.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mixprec/mixprec.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

// ---- fsync and rename, seen and failed at will ----------------------------------------------

std::mutex calls_mutex;
std::vector<std::string> calls;   // "fsync <path>", "rename <from> <to>"
std::atomic<int> fail_fsync{0};   // errno for the next fsync, or 0
std::atomic<int> fail_rename{0};  // errno for the next rename, or 0

std::string path_of(int fd) {
  char buf[4096];
  const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
}

void record(const std::string& call) {
  const std::lock_guard<std::mutex> lock(calls_mutex);
  calls.push_back(call);
}

}  // namespace

extern "C" int fsync(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fsync"));
  record("fsync " + path_of(fd));
  if (const int e = fail_fsync.exchange(0)) {
    errno = e;
    return -1;
  }
  return real(fd);
}

extern "C" int rename(const char* from, const char* to) {
  static auto real = reinterpret_cast<int (*)(const char*, const char*)>(dlsym(RTLD_NEXT, "rename"));
  record(std::string("rename ") + from + " " + to);
  if (const int e = fail_rename.exchange(0)) {
    errno = e;
    return -1;
  }
  return real(from, to);
}

namespace {

namespace fs = std::filesystem;

// A folder of its own for each test.
std::string folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "mixprec_save_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return fs::canonical(dir).string();
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A model (a Linear of `inputs` x 4), optimizer and scaler whose weights are all `value`.
struct Training {
  explicit Training(float value, std::int64_t inputs = 256)
      : model(torch::nn::LinearOptions(inputs, 4)) {
    torch::NoGradGuard no_grad;
    model->weight.fill_(value);
    model->bias.fill_(value);
  }
  torch::nn::Linear model;
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.1)};
  mixprec::GradScaler scaler;
  void save(const std::string& path) { mixprec::save_checkpoint(path, *model, opt, scaler); }
};

// The weight a checkpoint file holds (all its elements are one value).
float weight_in(const std::string& path) {
  const std::string bytes = read_file(path);
  const c10::IValue v = mixprec::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  const at::Tensor w = v.toGenericDict().at("model").toGenericDict().at("weight").toTensor();
  const float first = w.reshape(-1)[0].item<float>();
  EXPECT_TRUE(torch::all(w == first).item<bool>()) << path << " mixes two checkpoints";
  return first;
}

// ---- tests ----------------------------------------------------------------------------------

// 3e5db6a wrote path + ".partial" with truncation: a link planted there redirected the save.
TEST(DurableSaveTest, APlantedLinkIsNeverFollowed) {
  const std::string dir = folder("planted");
  const std::string victim = dir + "/victim.txt", target = dir + "/ckpt.pt";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, target + ".partial");
  Training(1.0f).save(target);
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_EQ(weight_in(target), 1.0f);
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt.pt", "ckpt.pt.partial", "victim.txt"}));
}

// torch.save's open() writes through a symlinked target: latest.pt keeps naming the file.
TEST(DurableSaveTest, ASymlinkedTargetIsWrittenThrough) {
  const std::string dir = folder("through");
  fs::create_directories(dir + "/runs");
  Training(1.0f).save(dir + "/runs/ckpt-10.pt");
  fs::create_symlink("runs/ckpt-10.pt", dir + "/latest.pt");  // relative, as users make them
  fs::create_symlink(dir + "/latest.pt", dir + "/link-to-link.pt");
  Training(2.0f).save(dir + "/link-to-link.pt");
  EXPECT_TRUE(fs::is_symlink(dir + "/latest.pt"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link-to-link.pt"));
  EXPECT_EQ(weight_in(dir + "/runs/ckpt-10.pt"), 2.0f);
  EXPECT_EQ(files_in(dir + "/runs"), std::vector<std::string>{"ckpt-10.pt"});  // made there
  // A dangling link: the file it names is made, as open() makes it.
  fs::create_symlink("runs/ckpt-20.pt", dir + "/next.pt");
  Training(3.0f).save(dir + "/next.pt");
  EXPECT_EQ(weight_in(dir + "/runs/ckpt-20.pt"), 3.0f);
}

// 3e5db6a's new file had 0666 & ~umask, whatever the old one had: a 0600 checkpoint became 0644.
TEST(DurableSaveTest, TheOldFilesModeIsKept) {
  const std::string dir = folder("mode");
  const std::string target = dir + "/ckpt.pt";
  const mode_t old_mask = umask(022);
  Training(1.0f).save(target);
  EXPECT_EQ(fs::status(target).permissions(), fs::perms(0644));  // new: 0666 & ~umask
  fs::permissions(target, fs::perms(0600));
  Training(2.0f).save(target);
  EXPECT_EQ(fs::status(target).permissions(), fs::perms(0600));
  umask(077);
  fs::permissions(target, fs::perms(0640));
  Training(3.0f).save(target);
  EXPECT_EQ(fs::status(target).permissions(), fs::perms(0640));  // not the umask's 0600
  umask(old_mask);
}

// A full disk (RLIMIT_FSIZE, in a child: the limit is the process's): the save throws naming the
// path and write(), the new file is gone, the old one untouched. 3e5db6a left the partial file.
TEST(DurableSaveTest, AFullDiskLeavesNoFileAndTheOldOneWhole) {
  const std::string dir = folder("full");
  const std::string target = dir + "/ckpt.pt";
  Training(1.0f).save(target);
  const std::string before = read_file(target);
  Training big(2.0f, 1 << 16);  // 1 MiB of weights, past the limit below
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // else the kernel ends the process at the limit
    const rlimit limit{16384, 16384};
    setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = "saved";
    try {
      big.save(target);
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
    }
    (void)!write(fds[1], message.data(), message.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[4096];
  const ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  waitpid(child, nullptr, 0);
  const std::string message(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  EXPECT_NE(message.find("mixprec::save_checkpoint: cannot save " + target + ": write() failed: File too large"),
            std::string::npos) << message;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"ckpt.pt"});
  EXPECT_TRUE(read_file(target) == before);
}

// The order that makes a save durable: fsync of the new file, its rename over the target, fsync
// of the folder. 3e5db6a called neither fsync.
TEST(DurableSaveTest, FsyncThenRenameThenFsyncOfTheFolder) {
  const std::string dir = folder("order");
  const std::string target = dir + "/ckpt.pt";
  calls.clear();
  Training(1.0f).save(target);
  ASSERT_EQ(calls.size(), 3u) << ::testing::PrintToString(calls);
  const std::string temporary = calls[0].substr(6);
  EXPECT_EQ(temporary.rfind(dir + "/.ckpt.pt.tmp-", 0), 0u) << calls[0];
  EXPECT_EQ(calls[1], "rename " + temporary + " " + target);
  EXPECT_EQ(calls[2], "fsync " + dir);
  // A failing fsync or rename: the error names the call, the target is as it was, no new file.
  const std::string before = read_file(target);
  fail_fsync = EIO;
  EXPECT_THROW_WITH(Training(2.0f).save(target), "fsync() failed: Input/output error; the file is as it was");
  fail_rename = EXDEV;
  EXPECT_THROW_WITH(Training(2.0f).save(target), "rename() failed: Invalid cross-device link");
  EXPECT_TRUE(read_file(target) == before);
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"ckpt.pt"});
}

// pickle_save_untagged(value, path), for a scaler's state or any piece of a checkpoint, is the
// same writer: a planted link is not followed, the mode is kept, fsync, rename, fsync of the
// folder, and a failure names the call and changes nothing.
TEST(DurableSaveTest, PickleSaveUntaggedToAPathIsTheSameWriter) {
  const std::string dir = folder("untagged");
  const std::string victim = dir + "/victim.txt", target = dir + "/scaler.pt";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, target + ".partial");
  mixprec::GradScaler scaler(mixprec::GradScalerOptions().init_scale(512.0));
  mixprec::pickle_save_untagged(scaler.state_dict(), target);
  fs::permissions(target, fs::perms(0600));
  calls.clear();
  mixprec::pickle_save_untagged(scaler.state_dict(), target);
  ASSERT_EQ(calls.size(), 3u) << ::testing::PrintToString(calls);
  EXPECT_EQ(calls[0].rfind("fsync " + dir + "/.scaler.pt.tmp-", 0), 0u) << calls[0];
  EXPECT_EQ(calls[1].rfind("rename " + dir + "/.scaler.pt.tmp-", 0), 0u) << calls[1];
  EXPECT_EQ(calls[2], "fsync " + dir);
  EXPECT_EQ(fs::status(target).permissions(), fs::perms(0600));
  EXPECT_EQ(read_file(victim), "precious");
  const std::string bytes = read_file(target);
  mixprec::GradScaler loaded;
  loaded.load_state_dict(
      mixprec::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict());
  EXPECT_EQ(loaded.get_scale(), 512.0);
  fail_rename = EXDEV;
  EXPECT_THROW_WITH(mixprec::pickle_save_untagged(scaler.state_dict(), target),
                    "mixprec::pickle_save_untagged: cannot save " + target + ": rename() failed");
  EXPECT_TRUE(read_file(target) == bytes);
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{"scaler.pt", "scaler.pt.partial", "victim.txt"}));
}

// 200 saves killed with SIGKILL at random points: the target always holds one checkpoint or the
// other, whole.
TEST(DurableSaveTest, AWriterKilledAnywhereLeavesTheOldOrTheNewFile) {
  const std::string dir = folder("killed");
  const std::string target = dir + "/ckpt.pt";
  constexpr std::int64_t kInputs = 1 << 16;  // 1 MiB of weights: a save takes milliseconds
  const auto t0 = std::chrono::steady_clock::now();
  Training(0.0f, kInputs).save(target);
  const auto save_time = std::chrono::steady_clock::now() - t0;
  std::mt19937 random(11);
  int seen_new = 0;
  for (int i = 0; i < 200; ++i) {
    const float old_value = weight_in(target);
    const float new_value = static_cast<float>(i + 1);
    Training run(new_value, kInputs);  // made before the fork: the child only saves
    const pid_t child = fork();
    if (child == 0) {
      run.save(target);
      _exit(0);
    }
    // Anywhere from the start of the save to half its time after its end.
    std::this_thread::sleep_for(save_time * (random() % 1500) / 1000);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    const float now = weight_in(target);
    EXPECT_TRUE(now == old_value || now == new_value) << "save " << i << ": " << now;
    seen_new += now == new_value;
  }
  std::printf("the new checkpoint was in place after %d of 200 kills\n", seen_new);
  EXPECT_GT(seen_new, 0);    // the kills fell after some renames
  EXPECT_LT(seen_new, 200);  // and before others
}

// Two writers to one path, and a reader loading it meanwhile: every file the reader finds is
// whole, the last rename wins, no file is left over. 3e5db6a's writers shared one partial file,
// truncated it under each other, and renamed it whatever it held.
TEST(DurableSaveTest, ConcurrentWritersNeverMix) {
  const std::string dir = folder("concurrent");
  const std::string target = dir + "/ckpt.pt";
  Training(1.0f, 1 << 18).save(target);
  std::atomic<int> writing{2}, failed_saves{0};
  std::vector<std::thread> writers;
  for (float value : {1.0f, 2.0f}) {
    writers.emplace_back([&target, &writing, &failed_saves, value] {
      Training run(value, 1 << 18);  // 4 MiB: a save is many write() calls
      for (int i = 0; i < 20; ++i) {
        try {
          run.save(target);
        } catch (const c10::Error&) {
          ++failed_saves;  // 3e5db6a: the other writer had renamed the shared partial file
        }
      }
      --writing;
    });
  }
  int reads = 0, broken = 0;
  while (writing > 0) {
    try {
      const float now = weight_in(target);
      broken += now != 1.0f && now != 2.0f;
    } catch (const c10::Error&) {
      ++broken;  // an empty, cut or mixed file
    }
    ++reads;
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failed_saves, 0);
  EXPECT_EQ(broken, 0) << "of " << reads << " reads";
  const float now = weight_in(target);
  EXPECT_TRUE(now == 1.0f || now == 2.0f) << now;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"ckpt.pt"});
}

}  // namespace
