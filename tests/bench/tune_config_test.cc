// bench tune --write: the aio keys and buffer_count set, every other key and the key order
// kept, the original kept as .bak, and a config that cannot take the settings left untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/tune_config.h"
#include "support/temp_dir.h"

namespace strata::bench {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

constexpr const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 8,
  "zero_optimization": {
    "stage": 3,
    "offload_param": { "device": "nvme", "nvme_path": "/var/tmp/strata", "buffer_count": 6 },
    "sub_group_size": 100000000
  },
  "aio": { "block_size": 1048576, "queue_depth": 32, "single_submit": false },
  "optimizer": { "type": "AdamW", "params": { "lr": 0.003, "eps": 1e-8 } }
})";

TEST(TuneConfig, RewritesOnlyTheTunedKeys) {
  strata::testing::TempDir dir;
  const std::string path = dir.path() + "/ds_config.json";
  WriteText(path, kConfig);
  auto written = WriteTunedConfig(path, {4 << 20, 8, 5});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->keys, (std::vector<std::string>{"aio.block_size", "aio.queue_depth",
                                                     "zero_optimization.offload_param.buffer_count"}));
  EXPECT_TRUE(written->backup_written);
  EXPECT_EQ(ReadText(path + ".bak"), kConfig);
  auto now = nlohmann::ordered_json::parse(ReadText(path));
  auto before = nlohmann::ordered_json::parse(std::string(kConfig));
  EXPECT_EQ(now["aio"]["block_size"], 4 << 20);
  EXPECT_EQ(now["aio"]["queue_depth"], 8);
  EXPECT_EQ(now["aio"]["single_submit"], false);
  EXPECT_EQ(now["zero_optimization"]["offload_param"]["buffer_count"], 5);
  // Everything else as it was, in the same order.
  before["aio"]["block_size"] = 4 << 20;
  before["aio"]["queue_depth"] = 8;
  before["zero_optimization"]["offload_param"]["buffer_count"] = 5;
  EXPECT_EQ(now.dump(), before.dump());
  std::vector<std::string> order;
  for (auto it = now.begin(); it != now.end(); ++it) order.push_back(it.key());
  EXPECT_EQ(order, (std::vector<std::string>{"train_micro_batch_size_per_gpu", "zero_optimization", "aio", "optimizer"}));
  // No temporary file left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2);
}

// A private config stays private, and a .bak that exists (the pristine config an earlier
// --write kept, or a file of the user's) is never replaced.
TEST(TuneConfig, KeepsTheModeAndNeverReplacesAnExistingBackup) {
  strata::testing::TempDir dir;
  const std::string path = dir.path() + "/ds_config.json";
  WriteText(path, kConfig);
  ::chmod(path.c_str(), 0600);
  auto first = WriteTunedConfig(path, {4 << 20, 8, 5});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((path + ".bak").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto second = WriteTunedConfig(path, {1 << 20, 16, 3});
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->backup_written);
  EXPECT_EQ(ReadText(path + ".bak"), kConfig);  // still the original, not the first rewrite
  EXPECT_EQ(nlohmann::ordered_json::parse(ReadText(path))["aio"]["queue_depth"], 16);
}

TEST(TuneConfig, AddsAioAndLeavesAnAbsentOffloadParamAbsent) {
  nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({"zero_optimization": {"stage": 2}})");
  auto keys = ApplyTuning(&c, {1 << 20, 16, 4});
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_EQ(c.dump(), R"({"zero_optimization":{"stage":2},"aio":{"block_size":1048576,"queue_depth":16}})");
}

TEST(TuneConfig, RefusesWhatItCannotEditAndLeavesTheFile) {
  strata::testing::TempDir dir;
  const std::string path = dir.path() + "/bad.json";
  const std::string text = R"({"aio": 7})";
  WriteText(path, text);
  auto r = WriteTunedConfig(path, {1 << 20, 16, std::nullopt});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadText(path), text);
  EXPECT_FALSE(std::filesystem::exists(path + ".bak"));
  WriteText(path, "{ not json");
  EXPECT_EQ(WriteTunedConfig(path, {1 << 20, 16, std::nullopt}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteTunedConfig(dir.path() + "/missing.json", {1 << 20, 16, 3}).status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace strata::bench
