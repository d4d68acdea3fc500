// A config rewritten by bench tune --write parses as `train` parses it, with the new settings
// (the torch-free config parser; built where LibTorch is, as the parser's library is).
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/tune_config.h"
#include "src/config/train_config.h"
#include "support/temp_dir.h"

namespace strata::bench {
namespace {

TEST(TuneConfigParse, TheRewrittenTinyConfigParses) {
  strata::testing::TempDir dir;
  const std::string path = dir.path() + "/tiny.json";
  std::filesystem::copy_file(STRATA_SOURCE_DIR "/configs/tiny_cpu.json", path);
  auto before = LoadTrainConfig(path);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_TRUE(WriteTunedConfig(path, {2 << 20, 16, 4}).ok());
  auto after = LoadTrainConfig(path);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->aio.block_size, 2 << 20);
  EXPECT_EQ(after->aio.queue_depth, 16);
  EXPECT_EQ(after->offload_param.buffer_count, 4);
  EXPECT_TRUE(after->warnings.empty());
  // The rest is what it was.
  EXPECT_EQ(after->micro_batch, before->micro_batch);
  EXPECT_EQ(after->lr, before->lr);
  EXPECT_EQ(after->steps, before->steps);
  EXPECT_EQ(after->model.n_layer, before->model.n_layer);
  EXPECT_EQ(after->offload_optimizer.nvme_path, before->offload_optimizer.nvme_path);
}

}  // namespace
}  // namespace strata::bench
