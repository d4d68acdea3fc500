// Example-aware rows (Note [Examples]): the examples file and its errors, rows of one example
// ("none") or several ("packed") with positions restarting at each, padding out of the loss,
// long examples split or truncated, and epochs that see every example once on any rank count.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "src/data/data.h"
#include "src/data/examples.h"
#include "src/data/side_file.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

// Token j of example i is 100 * (i + 1) + j: a token says which example it is from and where.
// The mask trains the second half of each example (its "completion").
struct ExampleFiles {
  testing::TempDir dir;
  std::string tokens = dir.path() + "/sft.u32";
  std::vector<int64_t> lengths;
  explicit ExampleFiles(std::vector<int64_t> example_lengths) : lengths(std::move(example_lengths)) {
    std::string bytes, mask, starts;
    int64_t at = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      starts += testing::LittleEndian(static_cast<uint64_t>(at), 8);
      for (int64_t j = 0; j < lengths[i]; ++j) {
        bytes += testing::LittleEndian(static_cast<uint64_t>(100 * (i + 1) + j), 4);
        mask.push_back(j >= lengths[i] / 2 ? 1 : 0);
      }
      at += lengths[i];
    }
    testing::WriteBytes(tokens, bytes);
    testing::WriteBytes(tokens + ".mask", mask);
    testing::WriteBytes(tokens + ".examples", starts);
  }
  DataConfig Config(Packing packing, LongExamples long_examples = LongExamples::kSplit) const {
    DataConfig c;
    c.path = tokens;
    c.packing = packing;
    c.long_examples = long_examples;
    c.eval_fraction = 0.2;
    return c;
  }
};

int64_t ExampleOf(int64_t token) { return token / 100 - 1; }
int64_t PlaceOf(int64_t token) { return token % 100; }

const std::vector<int64_t> kLengths = {5, 9, 3, 17, 2, 12, 7, 40, 6, 1, 11, 8, 4, 13, 9, 6, 10, 5, 7, 3};

// Every row: each run of positions 0, 1, ... is one example's consecutive tokens, inputs and
// targets alike; padding (after the last example) is out of the loss; the mask is the target's.
void ExpectWellFormedRows(const Batch& b, int64_t T, int64_t* examples_in_rows) {
  ASSERT_TRUE(b.positions.defined() && b.loss_mask.defined());
  for (int64_t r = 0; r < b.inputs.size(0); ++r) {
    int64_t example = -1, padding_from = T;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t in = b.inputs[r][t].item<int64_t>(), out = b.targets[r][t].item<int64_t>();
      const int64_t pos = b.positions[r][t].item<int64_t>();
      if (in == 0) {  // padding: positions restart once, nothing trained
        if (padding_from == T) padding_from = t;
        EXPECT_EQ(pos, t - padding_from);
        EXPECT_FALSE(b.loss_mask[r][t].item<bool>());
        continue;
      }
      ASSERT_EQ(padding_from, T) << "an example after the padding, row " << r;
      if (pos == 0) {
        example = ExampleOf(in);
        ++*examples_in_rows;
      }
      EXPECT_EQ(ExampleOf(in), example) << "row " << r << " position " << t;
      EXPECT_EQ(ExampleOf(out), example);
      EXPECT_EQ(PlaceOf(out), PlaceOf(in) + 1);
      EXPECT_EQ(b.loss_mask[r][t].item<bool>(), PlaceOf(out) >= kLengths[static_cast<size_t>(example)] / 2);
    }
  }
}

TEST(ExamplesFile, BadFilesAreErrorsNamingBothFiles) {
  std::vector<int64_t> starts;
  EXPECT_TRUE(DecodeExampleStarts(testing::LittleEndian(0, 8) + testing::LittleEndian(5, 8), 10, "e", "t", &starts).ok());
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 5}));
  for (auto [bytes, needle] : std::vector<std::pair<std::string, std::string>>{
           {testing::LittleEndian(0, 8) + "abc", "not a multiple of 8"},
           {"", "is empty"},
           {testing::LittleEndian(3, 8), "starts at token 3, not 0"},
           {testing::LittleEndian(0, 8) + testing::LittleEndian(4, 8) + testing::LittleEndian(4, 8), "not after example 1"},
           {testing::LittleEndian(0, 8) + testing::LittleEndian(10, 8), "has 10 tokens"}}) {
    const Status s = DecodeExampleStarts(bytes, 10, "sft.u32.examples", "sft.u32", &starts);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("sft.u32.examples"), std::string::npos) << s.message();
  }
}

TEST(ExampleRows, NoneIsOneExampleARowAndLongOnesSplitOrTruncate) {
  // Examples of 5, 2, 1 and 23 tokens; rows of 8 targets.
  const std::vector<int64_t> starts = {0, 5, 7, 8};
  ExampleRows split = BuildExampleRows(starts, 0, 31, 31, 8, Packing::kNone, LongExamples::kSplit);
  ASSERT_EQ(split.rows(), 5);  // 5, 2, then 23 tokens as 9 + 9 + 7 (overlapping by one); the 1-token one has no target
  EXPECT_EQ(split.examples, 3);
  EXPECT_EQ(split.split_examples, 1);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 5}, {5, 2}, {8, 9}, {16, 9}, {24, 7}};
  for (int64_t r = 0; r < 5; ++r) {
    ASSERT_EQ(split.first[r + 1] - split.first[r], 1);
    EXPECT_EQ(split.pieces[r].begin, want[r].first);
    EXPECT_EQ(split.pieces[r].length, want[r].second);
  }
  ExampleRows cut = BuildExampleRows(starts, 0, 31, 31, 8, Packing::kNone, LongExamples::kTruncate);
  ASSERT_EQ(cut.rows(), 3);
  EXPECT_EQ(cut.pieces[2].length, 9);
  ExampleRows packed = BuildExampleRows(starts, 0, 31, 31, 8, Packing::kPacked, LongExamples::kSplit);
  ASSERT_EQ(packed.rows(), 4);  // [5 + 2 tokens: 4 + 1 targets], [9], [9], [7]
  EXPECT_EQ(packed.first[1], 2);
}

TEST(ExampleData, PackedRowsHoldWholeExamplesWithRestartingPositions) {
  ExampleFiles f(kLengths);
  const int64_t T = 16;
  auto ds = TokenDataset::Open(f.Config(Packing::kPacked), 100000, T);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_TRUE((*ds)->has_loss_mask());
  EXPECT_NE((*ds)->description().find("packed examples in"), std::string::npos) << (*ds)->description();
  int64_t examples = 0, sum = 0;
  for (uint64_t i = 0; i < 6; ++i) {
    const Batch b = (*ds)->Get(Split::kTrain, i, 4);
    ExpectWellFormedRows(b, T, &examples);
    sum += b.loss_mask.sum().item<int64_t>();
  }
  EXPECT_GT(examples, 24);  // several examples a row
  EXPECT_EQ((*ds)->LossTokens(Split::kTrain, 0, 6, 4), sum);
  int64_t eval_examples = 0;
  ExpectWellFormedRows((*ds)->Get(Split::kEval, 0, 4), T, &eval_examples);
}

TEST(ExampleData, NoneHoldsOneExampleARowPadded) {
  ExampleFiles f(kLengths);
  const int64_t T = 16;
  auto ds = TokenDataset::Open(f.Config(Packing::kNone), 100000, T);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i = 0; i < 5; ++i) {
    int64_t examples = 0;
    const Batch b = (*ds)->Get(Split::kTrain, i, 4);
    ExpectWellFormedRows(b, T, &examples);
    EXPECT_EQ(examples, 4);
  }
}

// Two epochs: every example (or piece of one) exactly once per epoch, in another order each
// epoch, the same rows for 1 rank x 4 rows and 2 ranks x 2 rows, and from a reopened dataset.
TEST(ExampleData, EpochsSeeEveryExampleOncePerEpochOnAnyRankCountAndAfterAResume) {
  ExampleFiles f(kLengths);
  const int64_t T = 16;
  DataConfig c = f.Config(Packing::kPacked);
  c.epochs = 2;
  auto ds = TokenDataset::Open(c, 100000, T);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const int64_t rows = (*ds)->epoch_windows();
  ASSERT_EQ(rows, (*ds)->train_rows().rows());
  std::vector<std::vector<int64_t>> order(2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::map<std::pair<int64_t, int64_t>, int> seen;  // (example, first place) of each piece
    for (int64_t n = epoch * rows; n < (epoch + 1) * rows; ++n) {
      const Batch one = (*ds)->Get(Split::kTrain, static_cast<uint64_t>(n), 1);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t in = one.inputs[0][t].item<int64_t>();
        if (in != 0 && one.positions[0][t].item<int64_t>() == 0) ++seen[{ExampleOf(in), PlaceOf(in)}];
      }
      order[epoch].push_back(one.inputs[0][0].item<int64_t>());
    }
    const auto& all = (*ds)->train_rows().pieces;
    EXPECT_EQ(seen.size(), all.size()) << "epoch " << epoch;
    for (const auto& [piece, count] : seen) EXPECT_EQ(count, 1) << piece.first << "/" << piece.second;
  }
  EXPECT_NE(order[0], order[1]);
  for (uint64_t index = 0; index < 6; ++index) {  // rank r of 2 reads index 2i + r with half the rows
    const Batch whole = (*ds)->Get(Split::kTrain, index, 4);
    for (uint64_t r = 0; r < 2; ++r)
      EXPECT_TRUE(torch::equal(whole.inputs.narrow(0, 2 * r, 2), (*ds)->Get(Split::kTrain, 2 * index + r, 2).inputs));
  }
  auto again = TokenDataset::Open(c, 100000, T);
  ASSERT_TRUE(again.ok());
  const Batch mid = (*again)->Get(Split::kTrain, 3, 4), before = (*ds)->Get(Split::kTrain, 3, 4);
  EXPECT_TRUE(torch::equal(mid.inputs, before.inputs) && torch::equal(mid.positions, before.positions));
}

TEST(ExampleData, MissingOrMismatchedExamplesAreErrorsNamingTheFiles) {
  ExampleFiles f(kLengths);
  DataConfig builtin;
  builtin.packing = Packing::kPacked;
  auto none = TokenDataset::Open(builtin, 100000, 16);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("needs a token file"), std::string::npos) << none.status().message();
  std::filesystem::remove(f.tokens + ".examples");
  auto missing = TokenDataset::Open(f.Config(Packing::kNone), 100000, 16);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(f.tokens + ".examples"), std::string::npos) << missing.status().message();
  testing::WriteBytes(f.tokens + ".examples", testing::LittleEndian(0, 8) + testing::LittleEndian(100000, 8));
  auto beyond = TokenDataset::Open(f.Config(Packing::kNone), 100000, 16);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("replaced without its examples file"), std::string::npos)
      << beyond.status().message();
  auto windows = TokenDataset::Open(f.Config(Packing::kWindows), 100000, 16);  // windows need no examples file
  EXPECT_TRUE(windows.ok()) << windows.status().ToString();
}

// A side file carries the fingerprint of the token file it was written for (side_file.h):
// one of another token file, whose sizes fit, used to train with wrong boundaries or a wrong
// mask; now it is refused naming both files, for the training file and the validation file
// alike. A file without the header is read as before, and said to be unchecked.
TEST(ExampleData, SideFilesOfAnotherTokenFileAreRefusedNamingBoth) {
  ExampleFiles f(kLengths);
  const std::string tokens = testing::ReadBytes(f.tokens);
  const TokenFingerprint mine{tokens.size() / 4, Crc32(tokens)};
  const std::string starts = testing::ReadBytes(f.tokens + ".examples"), mask = testing::ReadBytes(f.tokens + ".mask");
  auto legacy = TokenDataset::Open(f.Config(Packing::kPacked), 100000, 16);
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  EXPECT_NE((*legacy)->description().find("'" + f.tokens + ".examples' has no fingerprint of its token file"),
            std::string::npos) << (*legacy)->description();
  testing::WriteBytes(f.tokens + ".examples", SideFileHeader(SideKind::kExamples, mine) + starts);
  testing::WriteBytes(f.tokens + ".mask", SideFileHeader(SideKind::kLossMask, mine) + mask);
  auto checked = TokenDataset::Open(f.Config(Packing::kPacked), 100000, 16);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ((*checked)->description().find("no fingerprint"), std::string::npos) << (*checked)->description();
  EXPECT_EQ((*checked)->Get(Split::kTrain, 0, 4).positions.sum().item<int64_t>(),
            (*legacy)->Get(Split::kTrain, 0, 4).positions.sum().item<int64_t>());  // the same rows

  struct Case {
    std::string what, side, bytes, says;
  };
  const TokenFingerprint other_count{mine.tokens + 1, mine.crc32}, other_crc{mine.tokens, mine.crc32 ^ 1};
  for (const Case& c : std::vector<Case>{
           {"count", ".examples", SideFileHeader(SideKind::kExamples, other_count) + starts,
            fmt::format("was written for a token file of {} tokens", mine.tokens + 1)},
           {"crc", ".examples", SideFileHeader(SideKind::kExamples, other_crc) + starts,
            "the side file belongs to another token file"},
           {"mask crc", ".mask", SideFileHeader(SideKind::kLossMask, other_crc) + mask,
            "the side file belongs to another token file"},
           {"kind", ".examples", SideFileHeader(SideKind::kLossMask, mine) + starts, "the side files were mixed up"},
           {"short", ".mask", SideFileHeader(SideKind::kLossMask, mine).substr(0, 20), "cut short inside its 32-byte"},
           {"version", ".mask", SideFileHeader(SideKind::kLossMask, mine).substr(0, 28) + testing::LittleEndian(2, 4) + mask,
            "format version 2"}}) {
    SCOPED_TRACE(c.what);
    const std::string saved = testing::ReadBytes(f.tokens + c.side);
    testing::WriteBytes(f.tokens + c.side, c.bytes);
    auto r = TokenDataset::Open(f.Config(Packing::kPacked), 100000, 16);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("'" + f.tokens + c.side + "'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("'" + f.tokens + "'"), std::string::npos) << r.status().message();
    testing::WriteBytes(f.tokens + c.side, saved);
  }
  // A validation file's examples, stale: (this case trained before, 40 examples in 99 rows).
  ExampleFiles eval({4, 6, 5, 7});
  DataConfig c = f.Config(Packing::kPacked);
  c.eval_path = eval.tokens;
  ASSERT_TRUE(TokenDataset::Open(c, 100000, 16).ok());
  const std::string eval_tokens = testing::ReadBytes(eval.tokens);
  testing::WriteBytes(eval.tokens + ".examples",
                      SideFileHeader(SideKind::kExamples, {mine.tokens, mine.crc32}) + testing::LittleEndian(0, 8) + testing::LittleEndian(3, 8));
  auto stale = TokenDataset::Open(c, 100000, 16);
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find(fmt::format("but '{}' has {} tokens (CRC-32 {:08x})", eval.tokens,
                                                      eval_tokens.size() / 4, Crc32(eval_tokens))),
            std::string::npos) << stale.status().message();
}

}  // namespace
}  // namespace strata::data
