// Preference pairs (DataConfig::pairs, Note [DPO]): PATH.pairs says a token file's examples are
// pairs; a batch holds whole pairs, their chosen rows first; the held-out split never cuts a
// pair; and what is not a pair file, or not pairs, is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "src/data/data.h"
#include "src/data/side_file.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

// Example i: 4 + i % 3 tokens, token j = 100 * (i + 1) + j; its last two tokens trained (the
// completion). Examples 2k and 2k + 1 are pair k's chosen and rejected.
struct PairFiles {
  testing::TempDir dir;
  std::string tokens = dir.path() + "/dpo.u32";
  explicit PairFiles(int examples, bool pairs_file = true, int untrained = -1) {
    std::string bytes, mask, starts;
    int64_t at = 0;
    for (int i = 0; i < examples; ++i) {
      starts += testing::LittleEndian(static_cast<uint64_t>(at), 8);
      const int n = 4 + i % 3;
      for (int j = 0; j < n; ++j) {
        bytes += testing::LittleEndian(static_cast<uint64_t>(100 * (i + 1) + j), 4);
        mask.push_back(j >= n - 2 && i != untrained ? 1 : 0);
      }
      at += n;
    }
    const TokenFingerprint f{static_cast<uint64_t>(at), Crc32(bytes)};
    testing::WriteBytes(tokens, bytes);
    testing::WriteBytes(tokens + ".mask", SideFileHeader(SideKind::kLossMask, f) + mask);
    testing::WriteBytes(tokens + ".examples", SideFileHeader(SideKind::kExamples, f) + starts);
    if (pairs_file) testing::WriteBytes(tokens + ".pairs", SideFileHeader(SideKind::kPairs, f));
  }
  DataConfig Config() const {
    DataConfig c;
    c.path = tokens;
    c.packing = Packing::kNone;
    c.long_examples = LongExamples::kTruncate;
    c.pairs = true;
    c.eval_fraction = 0.2;
    return c;
  }
};

int64_t PairExample(int64_t token) { return token / 100 - 1; }

TEST(DpoPairs, ABatchHoldsWholePairsChosenRowsFirst) {
  PairFiles f(40);
  auto ds = TokenDataset::Open(f.Config(), 1 << 20, 8);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_TRUE((*ds)->pairs());
  EXPECT_EQ((*ds)->rows(Split::kTrain) % 2, 0);
  EXPECT_EQ((*ds)->rows(Split::kEval) % 2, 0);
  EXPECT_GT((*ds)->rows(Split::kEval), 0);
  for (Split split : {Split::kTrain, Split::kEval}) {
    for (uint64_t index = 0; index < 5; ++index) {
      const Batch b = (*ds)->Get(split, index, 6);
      const int64_t* in = b.inputs.data_ptr<int64_t>();
      const int64_t* rows = b.rows.data_ptr<int64_t>();
      for (int p = 0; p < 3; ++p) {
        const int64_t chosen = PairExample(in[p * 8]), rejected = PairExample(in[(3 + p) * 8]);
        EXPECT_EQ(chosen % 2, 0) << "row " << p;
        EXPECT_EQ(rejected, chosen + 1) << "row " << p;
        EXPECT_EQ(rows[3 + p], rows[p] + 1);  // the dataset's rows: the reference's index
        EXPECT_EQ(rows[p] >= (*ds)->first_row(Split::kEval), split == Split::kEval);
      }
    }
  }
  // Every row of both splits in order, each once (the reference pass), the last batch padded.
  std::set<int64_t> seen;
  for (Split split : {Split::kTrain, Split::kEval})
    for (int64_t first = 0; first < (*ds)->rows(split); first += 4) {
      const int64_t n = std::min<int64_t>(4, (*ds)->rows(split) - first);
      const Batch b = (*ds)->RowsInOrder(split, first, n, 4);
      for (int64_t r = 0; r < n; ++r) EXPECT_TRUE(seen.insert(b.rows.data_ptr<int64_t>()[r]).second);
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), (*ds)->rows(Split::kTrain) + (*ds)->rows(Split::kEval));
}

TEST(DpoPairs, WhatIsNotPairsIsRefusedByName) {
  {
    PairFiles f(40, /*pairs_file=*/false);
    auto ds = TokenDataset::Open(f.Config(), 1 << 20, 8);
    ASSERT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find("has no '" + f.tokens + ".pairs'"), std::string::npos)
        << ds.status().message();
  }
  {
    PairFiles f(41);
    auto ds = TokenDataset::Open(f.Config(), 1 << 20, 8);
    ASSERT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find("holds 41 examples: preference pairs are an even number"), std::string::npos)
        << ds.status().message();
  }
  {
    PairFiles f(40, true, /*untrained=*/3);
    auto ds = TokenDataset::Open(f.Config(), 1 << 20, 8);
    ASSERT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find("the rejected completion of pair 1 of the training split trains no token"),
              std::string::npos)
        << ds.status().message();
  }
  {  // a validation file's pair is named with the validation file
    PairFiles f(40), v(10, true, /*untrained=*/2);
    DataConfig c = f.Config();
    c.eval_path = v.tokens;
    auto ds = TokenDataset::Open(c, 1 << 20, 8);
    ASSERT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find("'" + v.tokens + "': the chosen completion of pair 1 of the held-out split"),
              std::string::npos)
        << ds.status().message();
  }
  {  // a pairs file of another token file
    PairFiles f(40), g(38);
    std::filesystem::copy_file(g.tokens + ".pairs", f.tokens + ".pairs",
                               std::filesystem::copy_options::overwrite_existing);
    auto ds = TokenDataset::Open(f.Config(), 1 << 20, 8);
    ASSERT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find("belongs to another token file"), std::string::npos) << ds.status().message();
  }
}

}  // namespace
}  // namespace strata::data
