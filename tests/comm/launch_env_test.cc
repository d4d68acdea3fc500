// LaunchEnv::FromEnvironment: torchrun variables, Slurm fallbacks, errors naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "strata/communicator.h"

namespace strata {
namespace {

const char* const kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};

// Sets exactly the given launcher variables for the test's duration, restoring the rest.
class ScopedLaunchEnv {
 public:
  explicit ScopedLaunchEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : kVars) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedLaunchEnv() {
    for (const char* name : kVars) unsetenv(name);
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST(LaunchEnv, NothingSetIsASingleRank) {
  ScopedLaunchEnv env({});
  auto e = LaunchEnv::FromEnvironment();
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(e->master_addr, "127.0.0.1");
  EXPECT_EQ(e->master_port, 29500);
}

TEST(LaunchEnv, ReadsTorchrunVariables) {
  ScopedLaunchEnv env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                       {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  auto e = LaunchEnv::FromEnvironment();
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->master_addr, "node7");
  EXPECT_EQ(e->master_port, 1234);
}

TEST(LaunchEnv, FallsBackToSlurm) {
  ScopedLaunchEnv env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  auto e = LaunchEnv::FromEnvironment();
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->world_size, 4);
  EXPECT_EQ(e->local_rank, 0);
}

TEST(LaunchEnv, TorchrunWinsOverSlurm) {
  ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "9"}});
  auto e = LaunchEnv::FromEnvironment();
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->world_size, 2);
}

struct BadCase {
  std::map<std::string, std::string> vars;
  std::string message;
};

TEST(LaunchEnv, ErrorsNameTheVariable) {
  const BadCase cases[] = {
      {{{"RANK", "3"}, {"WORLD_SIZE", "2"}}, "RANK=3 but WORLD_SIZE=2"},
      {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}, "SLURM_PROCID=4 but SLURM_NTASKS=4"},
      {{{"RANK", "x1"}, {"WORLD_SIZE", "2"}}, "RANK='x1' is not an integer"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0"},
      {{{"RANK", "1"}}, "RANK is set (1) but WORLD_SIZE is not"},
      {{{"MASTER_PORT", "70000"}}, "MASTER_PORT=70000"},
      {{{"MASTER_ADDR", ""}}, "MASTER_ADDR"},
      {{{"LOCAL_RANK", "-1"}}, "LOCAL_RANK=-1"},
  };
  for (const BadCase& c : cases) {
    ScopedLaunchEnv env(c.vars);
    auto e = LaunchEnv::FromEnvironment();
    ASSERT_FALSE(e.ok()) << c.message;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(c.message), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace strata
