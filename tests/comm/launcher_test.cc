// The one-node launcher: this test binary re-executes itself as the ranks, filtered to the
// LauncherChild test, whose behaviour STRATA_TEST_LAUNCH_MODE selects.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "src/comm/launcher.h"
#include "strata/communicator.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

constexpr const char* kModeVar = "STRATA_TEST_LAUNCH_MODE";

// Runs only as a launched rank. Exits the process itself: the exit code is the result.
TEST(LauncherChild, Run) {
  if (!IsLaunchedRank()) GTEST_SKIP() << "runs only under LaunchLocalRanks";
  const std::string mode = std::getenv(kModeVar) ? std::getenv(kModeVar) : "";
  auto env = LaunchEnv::FromEnvironment();
  if (!env.ok()) _exit(10);
  if (mode == "env") _exit(env->world_size == 3 && env->local_rank == env->rank && env->master_port > 0 ? 0 : 11);
  if (mode == "fail") {
    if (env->rank == 1) _exit(3);
    std::this_thread::sleep_for(60s);  // the launcher must terminate this rank
    _exit(12);
  }
  if (mode == "sigint") {
    if (env->rank == 0) kill(getppid(), SIGINT);  // as if Ctrl-C reached the launcher
    std::this_thread::sleep_for(60s);  // the forwarded SIGINT must end this rank
    _exit(17);
  }
  if (mode == "allreduce") {
    auto comm = MakeTcpCommunicator(*env, 5s);
    if (!comm.ok()) _exit(13);
    float x = static_cast<float>(env->rank + 1);
    if (!(*comm)->AllReduce(&x, 1, DType::kF32, ReduceOp::kSum).ok()) _exit(14);
    _exit(x == 6.0f ? 0 : 15);
  }
  _exit(16);
}

int Launch(int nproc, const char* mode) {
  setenv(kModeVar, mode, 1);
  LaunchOptions opts;
  opts.nproc = nproc;
  opts.argv = {"strata-test-rank", "--gtest_filter=LauncherChild.Run"};
  opts.grace = 2000ms;
  int rc = LaunchLocalRanks(opts);
  unsetenv(kModeVar);
  return rc;
}

TEST(Launcher, ChildrenGetTheTorchrunEnvironment) {
  if (IsLaunchedRank()) GTEST_SKIP();
  EXPECT_EQ(Launch(3, "env"), 0);
}

TEST(Launcher, RanksFormATcpRing) {
  if (IsLaunchedRank()) GTEST_SKIP();
  EXPECT_EQ(Launch(3, "allreduce"), 0);
}

TEST(Launcher, AFailingRankStopsTheOthersAndGivesItsCode) {
  if (IsLaunchedRank()) GTEST_SKIP();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Launch(3, "fail"), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "the sleeping ranks were not terminated";
}

TEST(Launcher, ForwardsSigintToTheRanks) {
  if (IsLaunchedRank()) GTEST_SKIP();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Launch(2, "sigint"), 128 + SIGINT);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

}  // namespace
}  // namespace strata
