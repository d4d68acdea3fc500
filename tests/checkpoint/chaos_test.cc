// Chaos: a 2-rank NVMe run checkpointing every step is killed again and again (seeded random
// moments: SIGKILL to every process, SIGKILL to one rank only, a stop signal to the launcher
// (each of src/base/stop_signals.h in turn), and kills planted inside a save), resumed from `latest` each time until it
// finishes; its export must equal an uninterrupted run's byte for byte, with no process and
// no swap folder left behind. Label "slow" (about a minute); CI runs it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/base/stop_signals.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::SwapFolders;

// Enough that the run outlasts its kills: 14 of them (each 0.2-1.8 s into a restart) took it
// about 50 steps on a 2-core machine, and three times that leaves room for a faster one.
constexpr int kSteps = 150;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last complete line of a log's text: where the run was when it was hit.
std::string LastLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t nl = text.rfind('\n');
  return (nl == std::string::npos ? text : text.substr(nl + 1)).substr(0, 90);
}

// What a leftover swap folder says about how it was left: its lock file, whether anyone
// holds it, and its age.
std::string DescribeSwapFolder(const std::string& path) {
  const std::string lock = path + "/owner.lock";
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "no owner.lock";
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  const auto age = fs::file_time_type::clock::now() - fs::last_write_time(lock);
  return fmt::format("owner.lock {}, {} s old", free ? "free" : "held",
                     std::chrono::duration_cast<std::chrono::seconds>(age).count());
}

struct Child {
  pid_t pid = -1;  // the launcher, leader of its own process group
};

// Starts `args` in its own process group, output appended to `log`.
Child Start(const std::string& args, const std::string& log) {
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::setpgid(0, 0);
    const std::string cmd = "exec " STRATA_BINARY " " + args + " >>" + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  ::setpgid(c.pid, c.pid);
  return c;
}

// A rank of the launcher (its first child), waited for while the launcher is still starting
// (on a loaded machine it may not have forked yet at the chosen moment); -1 if it never came.
pid_t SomeRank(pid_t launcher) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream in(fmt::format("/proc/{}/task/{}/children", launcher, launcher));
    pid_t rank = -1;
    if (in >> rank) return rank;
    if (::kill(launcher, 0) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// Reaps the launcher and every rank (this process is their subreaper); false if any is
// still running after `limit` (generous: a loaded machine is slow, not broken).
bool ReapAll(pid_t launcher, int* launcher_status, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    int status = 0;
    const pid_t got = ::waitpid(-1, &status, WNOHANG);
    if (got == launcher) *launcher_status = status;
    if (got < 0 && errno == ECHILD) return true;
    if (got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-launcher, SIGKILL);
  return false;
}

TEST(Chaos, KilledAndResumedRunsEqualTheUninterruptedOneBitwise) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphaned ranks come back to us
  testing::TempDir dir;
  const std::string swap = dir.path() + "/swap";
  fs::create_directory(swap);
  const std::string base = fmt::format(
      "train --nproc 2 --steps {} --save-interval 1 --set strata.model.n_layer=2 --set strata.model.d_model=64 "
      "--set strata.eval_interval=0 --set steps_per_print=1 --set zero_optimization.offload_param.nvme_path={} "
      "--set zero_optimization.offload_optimizer.nvme_path={}", kSteps, swap, swap);
  auto run_to_end = [&](const std::string& args, const std::string& log) {
    Child c = Start(args, log);
    int status = -1;
    EXPECT_TRUE(ReapAll(c.pid, &status, std::chrono::seconds(1200)));
    return status;
  };
  const std::string ref = dir.path() + "/ref", ck = dir.path() + "/ck", log = dir.path() + "/log.txt";
  ASSERT_EQ(run_to_end(base + " --save " + ref, log), 0) << ReadAll(log);

  std::mt19937 rng(20261123);
  std::uniform_real_distribution<double> delay_s(0.2, 1.8);
  std::vector<std::string> moments;
  int kills = 0, stops = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const bool resume = fs::exists(ck + "/latest");
    std::string args = base + " --save " + ck + (resume ? " --resume " + ck : "");
    const int kind = kills >= 14 ? -1 : static_cast<int>(rng() % 10);  // after 14 kills: let it finish
    if (kind == 9) args += trial % 2 ? " --set strata.debug_crash_in_save=before_rename"
                                     : " --set strata.debug_crash_in_save=shard_partly_written";
    const std::string trial_log = fmt::format("{}/trial{}.txt", dir.path(), trial);
    const std::set<std::string> folders_before = SwapFolders(swap);  // a SIGKILL leaves its own
    Child c = Start(args, trial_log);
    const double wait = delay_s(rng);
    const auto until = Clock::now() + std::chrono::duration<double>(wait);
    int status = -1;
    bool exited = false;
    while (kind >= 0 && kind != 9 && Clock::now() < until && !exited) {
      exited = ::waitpid(c.pid, &status, WNOHANG) == c.pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::string what, last = LastLine(ReadAll(trial_log));  // read before the kill: the moment it hit
    int stop_signal = 0;
    if (!exited && kind >= 0 && kind <= 5) {
      what = "SIGKILL to all";
      ::kill(-c.pid, SIGKILL);
    } else if (!exited && (kind == 6 || kind == 7)) {
      what = "SIGKILL to one rank";
      const pid_t rank = SomeRank(c.pid);
      if (rank > 0) ::kill(rank, SIGKILL);
    } else if (!exited && kind == 8) {
      stop_signal = kStopSignals[stops++ % std::size(kStopSignals)];
      what = fmt::format("SIG{} to the launcher", sigabbrev_np(stop_signal));
      ::kill(c.pid, stop_signal);
    } else if (kind == 9) {
      what = "killed inside a save";
    }
    if (!exited) {  // a clean stop, a kill, or (kind -1, 9) the run to its end
      ASSERT_TRUE(ReapAll(c.pid, &status, std::chrono::seconds(kind < 0 || kind == 9 ? 1200 : 120)))
          << "processes left running after trial " << trial;
    }
    if (exited || kind == 9) last = LastLine(ReadAll(trial_log));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      moments.push_back(fmt::format("trial {}: finished ({})", trial, LastLine(ReadAll(trial_log))));
      break;
    }
    ASSERT_FALSE(what.empty()) << "trial " << trial << " failed on its own:\n" << ReadAll(trial_log);
    if (stop_signal != 0) {  // a clean stop
      // Hit before its handlers were installed (still loading, on a loaded machine), it ends on
      // the signal itself, having made nothing yet: as a shell reports it, the same code.
      const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      EXPECT_EQ(code, 128 + stop_signal) << ReadAll(trial_log);
      for (const std::string& f : SwapFolders(swap))  // none of its own left (older ones it may not have seen)
        EXPECT_TRUE(folders_before.count(f)) << f << " left by a clean stop\n" << ReadAll(trial_log);
    }
    ++kills;
    moments.push_back(fmt::format("trial {}: {} after {:.2f} s, at \"{}\"", trial, what, wait, last));
  }
  for (const std::string& m : moments) std::printf("[ chaos ] %s\n", m.c_str());
  EXPECT_GE(kills, 10);
  ASSERT_NE(moments.back().find("finished"), std::string::npos);
  const std::string a = dir.path() + "/a.safetensors", b = dir.path() + "/b.safetensors";
  ASSERT_EQ(run_to_end("export " + ref + " --out " + a, log), 0) << ReadAll(log);
  ASSERT_EQ(run_to_end("export " + ck + " --out " + b, log), 0) << ReadAll(log);
  EXPECT_TRUE(ReadAll(a) == ReadAll(b)) << "the export after " << kills << " kills differs from the uninterrupted run's";
  for (const std::string& f : SwapFolders(swap))
    ADD_FAILURE() << "swap folder left behind: " << f << " (" << DescribeSwapFolder(swap + "/" + f) << ")";
}

}  // namespace
}  // namespace strata
