// Every stop signal (src/base/stop_signals.h) ends a run cleanly: within a second or so, exit
// code 128 + signal, every rank's swap folder removed, the last checkpoint loadable, no
// temporary left. To one rank, and to the launcher of two (which forwards them, as Ctrl-C or a
// closed terminal reaches the whole group); in the middle of a save; an export. A reader that
// goes away (SIGPIPE) stops the run the same way, and a file-size limit (ulimit -f) reached by
// a write is an error naming the file, with nothing left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <fstream>
#include <sstream>
#include <thread>

#include "support/cli_run.h"
#include "src/base/stop_signals.h"
#include "src/checkpoint/manifest.h"
#include "support/temp_dir.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

struct Stopped {
  int exit_code = -1;
  double seconds = 0;  // from the signal to the exit
  std::string out;
};

// Starts `args`, waits for "train step   <after>" on its output, sends `sig` to it, and reaps it.
// `shell` runs before the binary is exec'ed (a `trap` that ignores a signal, as nohup does).
Stopped RunAndSignal(const std::string& args, const std::string& after, int sig, const std::string& shell = "") {
  auto t0 = std::chrono::steady_clock::now();
  bool sent = false;
  const testing::CliRun r = testing::RunStrataWatching(args, [&](const std::string& out, pid_t pid) {
    if (!sent && out.find("train step   " + after) != std::string::npos) {
      t0 = std::chrono::steady_clock::now();
      ::kill(pid, sig);
      sent = true;
    }
  }, shell);
  Stopped s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.out = r.out;
  EXPECT_TRUE(sent) << s.out;
  s.exit_code = r.exit_code >= 0 ? r.exit_code : 128 + r.signal;
  return s;
}

TEST(Signals, StopTheRunCleanly) {
  struct Case {
    int sig;
    int nproc;
  };
  for (const Case c : {Case{SIGTERM, 1}, Case{SIGINT, 2}}) {
    SCOPED_TRACE(::testing::Message() << strsignal(c.sig) << ", " << c.nproc << " rank(s)");
    testing::TempDir dir;
    const std::string swap = dir.path() + "/swap", ck = dir.path() + "/ckpt";
    std::filesystem::create_directory(swap);
    const std::string base = "train --nproc " + std::to_string(c.nproc) +
                             " --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.eval_batches=1 "
                             "--set steps_per_print=1 --set zero_optimization.offload_param.nvme_path=" + swap +
                             " --set zero_optimization.offload_optimizer.nvme_path=" + swap + " --save " + ck;
    Stopped s = RunAndSignal(base + " --steps 100000 --save-interval 2", " 5", c.sig);
    EXPECT_EQ(s.exit_code, 128 + c.sig) << s.out;
    EXPECT_LT(s.seconds, 10.0) << s.out;  // ~0.03 s here; the bound only catches a hang
    EXPECT_TRUE(testing::SwapFolders(swap).empty()) << s.out;
    EXPECT_NE(s.out.find(std::string("got ") + strsignal(c.sig) + ": stopping"), std::string::npos) << s.out;
    auto latest = ckpt::ResolveStepDir(ck);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    auto resumed = testing::RunStrata(base + " --steps 8 --resume " + ck);
    EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
    EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
    EXPECT_TRUE(testing::SwapFolders(swap).empty());
  }
}

// Everything below `dir` whose name says it is unfinished: a temporary output
// (".NAME.tmp-PID-N"), a step folder being written ("step_N.tmp") or a swap folder.
std::vector<std::string> Leftovers(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos || name.find("strata-swap-") != std::string::npos)
      found.push_back(fs::relative(e.path(), dir).string());
  }
  return found;
}

std::string Base(const std::string& dir, int nproc) {
  return "train --nproc " + std::to_string(nproc) +
         " --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.eval_batches=1 "
         "--set steps_per_print=1 --set zero_optimization.offload_param.nvme_path=" + dir +
         "/swap --set zero_optimization.offload_optimizer.nvme_path=" + dir + "/swap";
}

// A closed terminal (SIGHUP), Ctrl-\ (SIGQUIT), an alarm, the user signals, and SIGPIPE and
// SIGXFSZ sent from outside: each used to kill the ranks and leave their swap folders.
TEST(Signals, EveryStopSignalEndsATwoRankRunCleanly) {
  for (int sig : kStopSignals) {
    if (sig == SIGINT || sig == SIGTERM) continue;  // StopTheRunCleanly
    SCOPED_TRACE(strsignal(sig));
    testing::TempDir dir;
    fs::create_directory(dir.path() + "/swap");
    const std::string ck = dir.path() + "/ckpt";
    Stopped s = RunAndSignal(Base(dir.path(), 2) + " --steps 100000 --save-interval 2 --save " + ck, " 3", sig);
    EXPECT_EQ(s.exit_code, 128 + sig) << s.out;
    EXPECT_NE(s.out.find(std::string("got ") + strsignal(sig) + ": stopping"), std::string::npos) << s.out;
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << s.out;
    EXPECT_TRUE(ckpt::ResolveStepDir(ck).ok()) << s.out;
  }
}

// A run stopped before its first checkpoint leaves no --save folder it created (it used to
// leave one holding only the lock file); a folder that was there before stays.
TEST(Signals, ARunStoppedBeforeItSavedLeavesNoSaveFolder) {
  testing::TempDir dir;
  fs::create_directory(dir.path() + "/swap");
  fs::create_directory(dir.path() + "/mine");
  for (const std::string& save : {dir.path() + "/new/ckpt", dir.path() + "/mine"}) {
    SCOPED_TRACE(save);
    Stopped s = RunAndSignal(Base(dir.path(), 2) + " --steps 100000 --save-interval 1000 --save " + save, " 2", SIGHUP);
    EXPECT_EQ(s.exit_code, 128 + SIGHUP) << s.out;
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << s.out;
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/new"));
  EXPECT_TRUE(fs::is_directory(dir.path() + "/mine"));
}

// A signal the caller ignores stays ignored (nohup's SIGHUP: the run goes on; SIGTERM then stops
// it), except SIGINT and SIGTERM, which a shell's background job inherits ignored yet must stop.
TEST(Signals, ACallersIgnoreHoldsForHangupButNotForInterrupt) {
  testing::TempDir dir;
  fs::create_directory(dir.path() + "/swap");
  bool hup_sent = false, term_sent = false;
  auto hup = testing::RunStrataWatching(Base(dir.path(), 2) + " --steps 100000",
                                        [&](const std::string& out, pid_t pid) {
                                          if (!hup_sent && out.find("train step    3") != std::string::npos) {
                                            hup_sent = ::kill(pid, SIGHUP) == 0;
                                          } else if (hup_sent && !term_sent &&
                                                     out.find("train step    8") != std::string::npos) {
                                            term_sent = ::kill(pid, SIGTERM) == 0;  // (it trained on past the hangup)
                                          }
                                        }, "trap '' HUP;");
  EXPECT_TRUE(term_sent) << hup.out;
  EXPECT_EQ(hup.exit_code, 128 + SIGTERM) << hup.out;
  EXPECT_EQ(hup.out.find("got Hangup"), std::string::npos) << hup.out;
  Stopped s = RunAndSignal(Base(dir.path(), 2) + " --steps 100000", " 3", SIGINT, "trap '' INT;");
  EXPECT_EQ(s.exit_code, 128 + SIGINT) << s.out;
  EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << s.out;
}

// Each stop signal arriving while both ranks write their shards: the save's folder is removed,
// `latest` still names the step before, and the run resumes from it.
TEST(Signals, AStopInTheMiddleOfASaveLeavesTheCheckpointBefore) {
  testing::TempDir dir;
  fs::create_directory(dir.path() + "/swap");
  const std::string ck = dir.path() + "/ckpt";
  const std::string base = Base(dir.path(), 2) + " --save " + ck;
  auto first = testing::RunStrata(base + " --steps 2");
  ASSERT_EQ(first.exit_code, 0) << first.out;
  for (int sig : kStopSignals) {
    SCOPED_TRACE(strsignal(sig));
    auto stopped = testing::RunStrata(base + " --steps 4 --resume " + ck +
                                      " --set strata.debug_crash_in_save=shard_partly_written"
                                      " --set strata.debug_crash_signal=" + std::to_string(sig));
    EXPECT_EQ(stopped.exit_code, 128 + sig) << stopped.out;
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << stopped.out;
    auto latest = ckpt::ResolveStepDir(ck);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(fs::path(*latest).filename(), "step_00000002") << stopped.out;
  }
  auto resumed = testing::RunStrata(base + " --steps 4 --resume " + ck);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
}

// `strata train | head -3`: the reader goes away; the next line written stops the run as a
// signal would, on one rank and on two.
TEST(Signals, AReaderThatGoesAwayStopsTheRunCleanly) {
  for (int nproc : {1, 2}) {
    SCOPED_TRACE(nproc);
    testing::TempDir dir;
    fs::create_directory(dir.path() + "/swap");
    const std::string rc = dir.path() + "/rc", err = dir.path() + "/err";
    const std::string cmd = "bash -c '" STRATA_BINARY " " + Base(dir.path(), nproc) + " --steps 100000 2>" + err +
                            " | head -3 >/dev/null; echo ${PIPESTATUS[0]} >" + rc + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(rc);
    int code = -1;
    in >> code;
    std::stringstream log;
    log << std::ifstream(err).rdbuf();
    EXPECT_EQ(code, 128 + SIGPIPE) << log.str();
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << log.str();
  }
}

// A file-size limit (ulimit -f) reached by the swap files, a checkpoint or an export: an error
// naming the file ("File too large"), exit 1, nothing left behind.
TEST(Signals, AFileSizeLimitIsAnErrorNamingTheFileNotADeath) {
  testing::TempDir dir;
  fs::create_directory(dir.path() + "/swap");
  const std::string ck = dir.path() + "/ckpt";
  const std::string on_cpu = " --set zero_optimization.offload_param.device=cpu "
                             "--set zero_optimization.offload_optimizer.device=cpu";
  ASSERT_EQ(testing::RunStrata(Base(dir.path(), 1) + " --steps 1 --save " + ck + on_cpu).exit_code, 0);
  struct Case {
    const char* what;
    std::string args;
    const char* file;  // a part of the name the error gives
  };
  const Case cases[] = {
      {"swap files", Base(dir.path(), 2) + " --steps 2", "swap.bin"},
      {"a save", Base(dir.path(), 1) + " --steps 2 --resume " + ck + " --save " + ck + on_cpu, "rank0.safetensors"},
      {"an export", "export " + ck + " --out " + dir.path() + "/m.safetensors", "m.safetensors"},
      {"an export folder", "export " + ck + " --out " + dir.path() + "/hf", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // 64 KiB (bash counts in KiB): less than a swap file, a shard or an export.
    const std::string cmd = "bash -c 'ulimit -f 64; exec " STRATA_BINARY " " + c.args + "' 2>&1";
    testing::CliRun r;
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
    const int st = pclose(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st << "\n" << r.out;
    EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.file), std::string::npos) << r.out;
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{}) << r.out;
    EXPECT_FALSE(fs::exists(dir.path() + "/m.safetensors") || fs::exists(dir.path() + "/hf"));
    auto latest = ckpt::ResolveStepDir(ck);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(fs::path(*latest).filename(), "step_00000001");
  }
}

// Waits (at most 10 s) until process `pid` catches `sig` (SigCgt in /proc/PID/status): whether
// its handlers were installed while it ran.
bool WaitForHandler(pid_t pid, int sig) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    bool running = false;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("State:", 0) == 0) running = line.find('Z') == std::string::npos;
      if (line.rfind("SigCgt:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1) return true;
    }
    if (!running) return false;  // exited (or never started)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// An export stopped by any stop signal, at any moment: the folder or file is complete, or not
// there at all, never a temporary.
TEST(Signals, AStoppedExportLeavesNoTemporary) {
  testing::TempDir dir;
  fs::create_directory(dir.path() + "/swap");
  const std::string ck = dir.path() + "/ckpt";
  ASSERT_EQ(testing::RunStrata(Base(dir.path(), 1) + " --steps 1 --save " + ck +
                               " --set strata.model.n_layer=4 --set strata.model.d_model=256").exit_code, 0);
  int stopped = 0, trial = 0;
  for (int sig : kStopSignals) {
    for (const char* out : {"/hf", "/m.safetensors"}) {
      SCOPED_TRACE(std::string(strsignal(sig)) + " " + out);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::execl(STRATA_BINARY, STRATA_BINARY, "export", ck.c_str(), "--out", (dir.path() + out).c_str(), nullptr);
        _exit(127);
      }
      EXPECT_TRUE(WaitForHandler(pid, sig)) << "no handler for it while the export ran";
      std::this_thread::sleep_for(std::chrono::milliseconds(4 * (trial++ % 10)));  // at moments through the export
      ::kill(pid, sig);
      int st = 0;
      ::waitpid(pid, &st, 0);
      const bool done = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!done) {
        ++stopped;
        EXPECT_TRUE((WIFEXITED(st) && WEXITSTATUS(st) == 128 + sig) || (WIFSIGNALED(st) && WTERMSIG(st) == sig)) << st;
        // Absent, or (a stop just after the rename into place) complete: the folder has its marker.
        if (fs::is_directory(dir.path() + out)) {
          EXPECT_TRUE(fs::exists(dir.path() + out + "/.strata-export.json"));
        }
      }
      EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{});
      fs::remove_all(dir.path() + out);
    }
  }
  EXPECT_GT(stopped, 0);
}

}  // namespace
}  // namespace strata
