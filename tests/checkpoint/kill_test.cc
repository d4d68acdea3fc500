// A process killed during a checkpoint save leaves the previous checkpoint loadable. Runs
// the real binary: it saves at step 2, then a second run resumes and is killed (SIGKILL,
// strata.debug_crash_in_save) at a point of the next save; a third run resumes from what
// `latest` names and must land on step 2.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "support/cli_run.h"

#include "src/checkpoint/manifest.h"
#include "support/small_disk.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::RunStrata;
using testing::RunStrataWatching;

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

// Bytes a folder occupies (allocated blocks, as a size-limited tmpfs counts them).
uint64_t AllocatedBytes(const std::string& path) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// A disk that fills up during a save: a clear error naming the file and errno, the
// incomplete step removed (its space returned), `latest` and the earlier steps loadable.
TEST(FullDisk, ASaveThatRunsOutOfSpaceLeavesTheEarlierCheckpointsLoadable) {
  testing::TempDir dir;
  const std::string base =
      "train --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.model.seq_len=32 "
      "--set strata.eval_batches=1 --set train_micro_batch_size_per_gpu=2 --set strata.save_interval=1 "
      "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
      " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path();
  // One checkpoint's size, then a file system with room for two and a half.
  auto probe = RunStrata(base + " --steps 1 --save " + dir.path() + "/probe");
  ASSERT_EQ(probe.exit_code, 0) << probe.out;
  const uint64_t one = AllocatedBytes(dir.path() + "/probe/step_00000001");
  testing::SmallDisk disk(dir.path() + "/disk", one * 5 / 2);
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();

  const std::string ck = disk.path() + "/ckpt";
  auto full = RunStrata(base + " --steps 3 --save " + ck);  // steps 1 and 2 fit, 3 does not
  EXPECT_EQ(full.exit_code, 1) << full.out;
  EXPECT_NE(full.out.find("No space left on device"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("step_00000003.tmp/rank0.safetensors"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("was removed"), std::string::npos) << full.out;
  EXPECT_FALSE(std::filesystem::exists(ck + "/step_00000003.tmp"));
  auto latest = ckpt::ResolveStepDir(ck);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(std::filesystem::path(*latest).filename(), "step_00000002");
  auto resumed = RunStrata(base + " --steps 3 --set strata.save_interval=0 --resume " + ck);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at step 2"), std::string::npos) << resumed.out;
}

// The disk filling up during training (not during a save) cannot fail a step: the swap
// file's space is reserved (posix_fallocate) when the engine starts. Here its tmpfs is filled
// to the last byte after step 2; the run finishes with the losses of a run on a roomy disk.
TEST(FullDisk, FillingTheSwapDiskDuringTrainingFailsNoStep) {
  testing::TempDir dir;
  testing::SmallDisk small(dir.path() + "/disk", 64 << 20);
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const std::string& disk = small.path();
  auto args = [](const std::string& swap) {
    return "train --steps 12 --set strata.model.n_layer=2 --set strata.model.d_model=64 --set strata.eval_interval=0 "
           "--set steps_per_print=1 --set zero_optimization.offload_param.nvme_path=" + swap +
           " --set zero_optimization.offload_optimizer.nvme_path=" + swap;
  };
  auto roomy = RunStrata(args(dir.path()));
  ASSERT_EQ(roomy.exit_code, 0) << roomy.out;
  bool filled = false;
  const auto run = RunStrataWatching(args(disk), [&](const std::string& out, pid_t) {
    if (filled || out.find("train step     2") == std::string::npos) return;
    const int fd = ::open((disk + "/filler").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> zeros(1 << 20, 0);
    while (::write(fd, zeros.data(), zeros.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    ::close(fd);
    filled = true;
  });
  const std::string& out = run.out;
  ASSERT_TRUE(filled) << out;
  EXPECT_EQ(run.exit_code, 0) << out;
  const std::regex final_loss("final loss ([0-9.]+)");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(roomy.out, a, final_loss)) << roomy.out;
  ASSERT_TRUE(std::regex_search(out, b, final_loss)) << out;
  EXPECT_EQ(a[1].str(), b[1].str());
}

}  // namespace
}  // namespace strata
