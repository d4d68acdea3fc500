// A process killed during a checkpoint save leaves the previous checkpoint loadable. Runs
// the real binary: it saves at step 2, then a second run resumes and is killed (SIGKILL,
// strata.debug_crash_in_save) at a point of the next save; a third run resumes from what
// `latest` names and must land on step 2.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.h"

#include "src/checkpoint/manifest.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::RunStrata;

class KilledDuringSave : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledDuringSave, LeavesThePreviousCheckpointLoadable) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ckpt";
  // A small single-rank run with everything on NVMe (in the test's folder).
  const std::string base =
      "train --steps {} --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.model.seq_len=32 "
      "--set strata.eval_batches=1 --set train_micro_batch_size_per_gpu=2 "
      "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
      " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path() + " --save " + ck;
  auto with_steps = [&](int steps) {
    std::string s = base;
    s.replace(s.find("{}"), 2, std::to_string(steps));
    return s;
  };
  auto first = RunStrata(with_steps(2));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  auto killed = RunStrata(with_steps(4) + " --resume " + ck + " --set strata.debug_crash_in_save=" + GetParam());
  EXPECT_EQ(killed.signal, 9) << "exit " << killed.exit_code << "\n" << killed.out;
  auto latest = ckpt::ResolveStepDir(ck);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(std::filesystem::path(*latest).filename(), "step_00000002");
  auto resumed = RunStrata(with_steps(3) + " --resume " + ck);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at step 2"), std::string::npos) << resumed.out;
  // The interrupted save's leftovers are replaced by the next save of that step.
  EXPECT_TRUE(std::filesystem::exists(ck + "/step_00000003/manifest.json"));
}

INSTANTIATE_TEST_SUITE_P(Points, KilledDuringSave,
                         ::testing::Values("shard_partly_written", "before_rename", "before_latest"));

}  // namespace
}  // namespace strata
