// The sweep's CSV and JSON: one line / point per (setting, direction), fio's cells empty or
// null when fio did not run, and the best settings named.
#include <gtest/gtest.h>

#include <sstream>

#include "bench/io_results.h"
#include "tests/bench/sweep_table_util.h"

namespace strata::bench {
namespace {

using testing::FakeTable;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(SweepCsv, HeaderAndOneLinePerSettingAndDirection) {
  const SweepTable t = FakeTable({{1 << 20, 16, 3.0, 2.0, 1.5, 2.5}, {128 << 10, 1, 1.0, 0.5, 1.0, 0.25}});
  const auto lines = Lines(SweepCsv(t));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "block_bytes,queue_depth,direction,store_gbps,store_min,store_max,rounds,fio_gbps,fio_min,"
                      "fio_max,store_over_fio");
  EXPECT_EQ(lines[1], "1048576,16,write,2.0000,1.8000,2.2000,3,2.5000,2.2500,2.7500,0.8000");
  EXPECT_EQ(lines[2], "1048576,16,read,3.0000,2.7000,3.3000,3,1.5000,1.3500,1.6500,2.0000");
  for (const auto& l : lines) EXPECT_EQ(std::count(l.begin(), l.end(), ','), 10) << l;
}

TEST(SweepCsv, FioCellsEmptyWithoutFio) {
  const auto lines = Lines(SweepCsv(FakeTable({{1 << 20, 4, 3.0, 2.0}})));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "1048576,4,write,2.0000,1.8000,2.2000,3,,,,");
}

// With each visit's pair recorded, store / fio is their median, not the ratio of the medians
// (a drift between visits moves both sides of a pair together).
TEST(SweepCsv, StoreOverFioIsThePairedMedianWhenPairsWereKept) {
  SweepTable t = FakeTable({{1 << 20, 16, 3.0, 2.0, 1.5, 2.5}});
  t.rows[1].paired = Summary{0.97, 0.9, 1.1, 5};
  EXPECT_DOUBLE_EQ(t.rows[1].StoreOverFio(), 0.97);
  EXPECT_DOUBLE_EQ(t.rows[0].StoreOverFio(), 0.8);  // no pairs: the ratio of the medians
  const auto lines = Lines(SweepCsv(t));
  EXPECT_EQ(lines[2], "1048576,16,read,3.0000,2.7000,3.3000,3,1.5000,1.3500,1.6500,0.9700");
  const auto j = nlohmann::json::parse(SweepJson(t).dump());
  EXPECT_DOUBLE_EQ(j["points"][1]["store_over_fio"].get<double>(), 0.97);
}

TEST(SweepJson, PointsBestAndNulls) {
  const SweepTable with = FakeTable({{1 << 20, 16, 3.0, 2.0, 1.5, 2.5}, {4 << 20, 4, 2.0, 3.0, 1.8, 2.0}});
  const auto j = nlohmann::json::parse(SweepJson(with).dump());
  ASSERT_EQ(j["points"].size(), 4u);
  EXPECT_EQ(j["points"][0]["direction"], "write");
  EXPECT_DOUBLE_EQ(j["points"][0]["store_gbps"]["median"].get<double>(), 2.0);
  EXPECT_EQ(j["best"]["read"]["store"]["block_bytes"], 1 << 20);
  EXPECT_EQ(j["best"]["write"]["store"]["block_bytes"], 4 << 20);
  EXPECT_EQ(j["best"]["write"]["fio"]["queue_depth"], 16);
  EXPECT_EQ(j["fio_anchor"], "fio io_uring --fixedbufs --registerfiles");

  const auto none = nlohmann::json::parse(SweepJson(FakeTable({{1 << 20, 4, 3.0, 2.0}})).dump());
  EXPECT_TRUE(none["fio_anchor"].is_null());
  EXPECT_TRUE(none["points"][0]["fio_gbps"].is_null());
  EXPECT_TRUE(none["points"][0]["store_over_fio"].is_null());
  EXPECT_TRUE(none["best"]["read"]["fio"].is_null());
}

TEST(SweepTable, LookupsAndLabels) {
  const SweepTable t = FakeTable({{4 << 20, 16, 3.0, 2.0}, {128 << 10, 1, 1.0, 0.5}, {4 << 20, 1, 2.0, 1.0}});
  EXPECT_EQ(t.Blocks(), (std::vector<uint32_t>{128 << 10, 4 << 20}));
  EXPECT_EQ(t.QueueDepths(), (std::vector<unsigned>{1, 16}));
  ASSERT_NE(t.Find(4 << 20, 1, IoDirection::kRead), nullptr);
  EXPECT_EQ(t.Find(128 << 10, 16, IoDirection::kRead), nullptr);
  EXPECT_EQ(BlockLabel(128 << 10), "128K");
  EXPECT_EQ(BlockLabel(8 << 20), "8M");
  EXPECT_EQ(BlockLabel(12288), "12K");
}

TEST(ParseBytes, UnitsDecimalsAndClearRefusals) {
  EXPECT_EQ(*ParseBytes("4096", "--size"), 4096u);
  EXPECT_EQ(*ParseBytes("1M", "--size"), 1u << 20);
  EXPECT_EQ(*ParseBytes("2gib", "--size"), 2ull << 30);
  EXPECT_EQ(*ParseBytes("21.5G", "--size"), 43ull << 29);
  EXPECT_EQ(*ParseBytes("0.5K", "--size"), 512u);
  for (const char* bad : {"", "G", ".5G", "1.G", "1.2.3G", "1X", "0.3", "99999999999999999999999G"}) {
    auto v = ParseBytes(bad, "--size");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("--size"), std::string::npos) << v.status().message();
  }
}

}  // namespace
}  // namespace strata::bench
