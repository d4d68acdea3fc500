// SIGTERM and SIGINT end a run cleanly: within a second or so, exit code 128 + signal, every
// rank's swap folder removed, the last checkpoint loadable. To one rank, and to the
// launcher of two (which forwards them, as Ctrl-C in a terminal reaches the whole group).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "support/cli_run.h"
#include "src/checkpoint/manifest.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

struct Stopped {
  int exit_code = -1;
  double seconds = 0;  // from the signal to the exit
  std::string out;
};

// Starts `args`, waits for "train step   <after>" on its output, sends `sig` to it, and reaps it.
Stopped RunAndSignal(const std::string& args, const std::string& after, int sig) {
  auto t0 = std::chrono::steady_clock::now();
  bool sent = false;
  const testing::CliRun r = testing::RunStrataWatching(args, [&](const std::string& out, pid_t pid) {
    if (!sent && out.find("train step   " + after) != std::string::npos) {
      t0 = std::chrono::steady_clock::now();
      ::kill(pid, sig);
      sent = true;
    }
  });
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

}  // namespace
}  // namespace strata
