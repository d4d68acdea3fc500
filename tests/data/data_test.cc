// Token data: file formats through temp files, errors that name the file, and batches
// that are a pure function of (seed, split, index) and never cross the split boundary.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "src/data/data.h"
#include "support/temp_dir.h"

namespace strata::data {
namespace {

std::string Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string Pack(const std::vector<uint32_t>& tokens, int width) {
  std::string bytes;
  for (uint32_t t : tokens) {
    for (int i = 0; i < width; ++i) bytes.push_back(static_cast<char>((t >> (8 * i)) & 0xFF));
  }
  return bytes;
}

DataConfig Config(const std::string& path, TokenFormat format = TokenFormat::kAuto) {
  DataConfig c;
  c.path = path;
  c.format = format;
  c.eval_fraction = 0.25;
  return c;
}

// Every row of `tokens` must be a consecutive run of `source` starting at some offset.
void ExpectRowsAreRuns(const Batch& b, const std::vector<uint32_t>& source) {
  const int64_t B = b.inputs.size(0), T = b.inputs.size(1);
  for (int64_t r = 0; r < B; ++r) {
    const auto start = static_cast<size_t>(b.inputs[r][0].item<int64_t>());  // tokens are their positions
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(b.inputs[r][t].item<int64_t>(), source[start + t]);
      ASSERT_EQ(b.targets[r][t].item<int64_t>(), source[start + t + 1]);
    }
  }
}

TEST(TokenDatasetTest, Uint16AndUint32RoundTrip) {
  testing::TempDir dir;
  for (auto [ext, width, vocab] : {std::tuple{".u16", 2, 65536}, std::tuple{".uint32", 4, 100000}}) {
    std::vector<uint32_t> tokens(1000);
    for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;  // a token is its position
    tokens[999] = static_cast<uint32_t>(vocab - 1);               // the widest value survives
    std::string path = Write(dir.path() + "/t" + ext, Pack(tokens, width));
    auto ds = TokenDataset::Open(Config(path), vocab, 8);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->tokens(Split::kTrain), 750);
    EXPECT_EQ((*ds)->tokens(Split::kEval), 250);
    EXPECT_NE((*ds)->description().find(path), std::string::npos);
    Batch b = (*ds)->Get(Split::kTrain, 0, 32);
    EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{32, 8}));
    EXPECT_EQ(b.inputs.scalar_type(), torch::kInt64);
    ExpectRowsAreRuns(b, tokens);
  }
}

TEST(TokenDatasetTest, ExplicitFormatAndTextBytes) {
  testing::TempDir dir;
  std::vector<uint32_t> tokens(200, 7);
  std::string path = Write(dir.path() + "/tokens.dat", Pack(tokens, 4));
  auto ds = TokenDataset::Open(Config(path, TokenFormat::kUint32), 8, 4);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->tokens(Split::kTrain) + (*ds)->tokens(Split::kEval), 200);

  std::string text(400, 'a');
  text[0] = static_cast<char>(0xC3);  // UTF-8 bytes are tokens 0..255
  auto txt = TokenDataset::Open(Config(Write(dir.path() + "/a.txt", text)), 256, 4);
  ASSERT_TRUE(txt.ok()) << txt.status().ToString();
  EXPECT_EQ((*txt)->tokens(Split::kTrain), 300);
  for (uint64_t i = 0; i < 50; ++i) {
    torch::Tensor in = (*txt)->Get(Split::kTrain, i, 8).inputs;
    EXPECT_TRUE(((in == 'a') | (in == 0xC3)).all().item<bool>());
  }
}

TEST(TokenDatasetTest, LlmcHeaderIsSkipped) {
  testing::TempDir dir;
  std::vector<uint32_t> header(256, 0), tokens(100, 3);
  header[0] = 20240520, header[1] = 1, header[2] = 100;
  auto ds = TokenDataset::Open(Config(Write(dir.path() + "/x.bin", Pack(header, 4) + Pack(tokens, 2))), 4, 8);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->tokens(Split::kTrain) + (*ds)->tokens(Split::kEval), 100);
}

TEST(TokenDatasetTest, BadFilesNameTheFileAndTheProblem) {
  testing::TempDir dir;
  const std::string d = dir.path();
  struct Case {
    std::string path;
    int64_t vocab;
    const char* problem;
  };
  std::vector<uint32_t> big(100, 5);
  big[42] = 300;
  const Case cases[] = {
      {d + "/missing.u16", 256, "does not exist"},
      {Write(d + "/empty.u16", ""), 256, "empty"},
      {Write(d + "/odd.u16", std::string(201, '\0')), 256, "not a multiple of the token width 2"},
      {Write(d + "/odd.u32", std::string(402, '\0')), 256, "not a multiple of the token width 4"},
      {Write(d + "/vocab.u16", Pack(big, 2)), 256, "token 300 at position 42 is >= vocab_size 256"},
      {Write(d + "/short.txt", std::string(30, 'x')), 256, "too short"},
      {"/dev/zero", 256, "is not a regular file"},  // used to read forever
      {d, 256, "is not a regular file"},
  };
  for (const Case& k : cases) {
    auto ds = TokenDataset::Open(Config(k.path), k.vocab, 8);
    ASSERT_FALSE(ds.ok()) << k.path;
    EXPECT_NE(ds.status().message().find(k.path), std::string::npos) << ds.status().ToString();
    EXPECT_NE(ds.status().message().find(k.problem), std::string::npos) << ds.status().ToString();
  }
  // Only the held-out split too short: the error says which eval_fraction would do.
  DataConfig held_out = Config("");  // built-in text, ~1 M tokens
  held_out.eval_fraction = 0.01;
  auto long_seq = TokenDataset::Open(held_out, 256, 32768);
  ASSERT_FALSE(long_seq.ok());
  EXPECT_NE(long_seq.status().message().find("strata.data.eval_fraction 0.032 would hold out enough"), std::string::npos)
      << long_seq.status().ToString();
  DataConfig bad = Config("");
  bad.eval_fraction = 1.0;
  auto ds = TokenDataset::Open(bad, 256, 8);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("eval_fraction"), std::string::npos);
}

TEST(TokenDatasetTest, GetIsAPureFunctionOfSeedSplitAndIndex) {
  auto a = TokenDataset::Open(DataConfig{}, 256, 32);
  auto b = TokenDataset::Open(DataConfig{}, 256, 32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal((*a)->Get(Split::kTrain, 5, 4).inputs, (*b)->Get(Split::kTrain, 5, 4).inputs));
  EXPECT_TRUE(torch::equal((*a)->Get(Split::kTrain, 5, 4).targets, (*a)->Get(Split::kTrain, 5, 4).targets));
  EXPECT_FALSE(torch::equal((*a)->Get(Split::kTrain, 5, 4).inputs, (*a)->Get(Split::kTrain, 6, 4).inputs));
  EXPECT_FALSE(torch::equal((*a)->Get(Split::kTrain, 5, 4).inputs, (*a)->Get(Split::kEval, 5, 4).inputs));
  // Row b of batch i (size B) is sequence i * B + b: W ranks of B rows (index i*W + r)
  // together draw the rows of one W*B batch (index i).
  torch::Tensor whole = (*a)->Get(Split::kTrain, 9, 8).inputs;
  for (uint64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(torch::equal(whole.narrow(0, 2 * r, 2), (*a)->Get(Split::kTrain, 9 * 4 + r, 2).inputs)) << r;
  }
  DataConfig other;
  other.seed = 99;
  auto c = TokenDataset::Open(other, 256, 32);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(torch::equal((*a)->Get(Split::kTrain, 5, 4).inputs, (*c)->Get(Split::kTrain, 5, 4).inputs));
}

TEST(TokenDatasetTest, SplitsAreDisjointAndCovered) {
  testing::TempDir dir;
  std::vector<uint32_t> tokens(400);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  auto ds = TokenDataset::Open(Config(Write(dir.path() + "/p.u16", Pack(tokens, 2))), 65536, 10);
  ASSERT_TRUE(ds.ok());
  const int64_t eval_begin = (*ds)->tokens(Split::kTrain);  // 300
  std::set<int64_t> train_starts;
  for (uint64_t i = 0; i < 200; ++i) {
    Batch t = (*ds)->Get(Split::kTrain, i, 8), e = (*ds)->Get(Split::kEval, i, 8);
    EXPECT_LT(t.targets.max().item<int64_t>(), eval_begin);
    EXPECT_GE(e.inputs.min().item<int64_t>(), eval_begin);
    EXPECT_EQ(e.targets.max().item<int64_t>() <= 399, true);
    for (int64_t r = 0; r < 8; ++r) train_starts.insert(t.inputs[r][0].item<int64_t>());
  }
  // 1600 draws over 290 possible starts: uniform sampling reaches both ends.
  EXPECT_EQ(*train_starts.begin(), 0);
  EXPECT_EQ(*train_starts.rbegin(), eval_begin - 11);
}

TEST(BuiltinTextTest, DeterministicPrintableAboutOneMegabyte) {
  const std::string& text = BuiltinText();
  EXPECT_EQ(&text, &BuiltinText());
  EXPECT_GE(text.size(), 1u << 20);
  EXPECT_LT(text.size(), (1u << 20) + 4096);
  for (unsigned char ch : text) ASSERT_TRUE(ch == '\n' || (ch >= 32 && ch < 127)) << static_cast<int>(ch);
  EXPECT_NE(text.find(" plus "), std::string::npos);
  EXPECT_NE(text.find("\n\n"), std::string::npos);
  auto ds = TokenDataset::Open(DataConfig{}, 256, 128);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->tokens(Split::kTrain) + (*ds)->tokens(Split::kEval), static_cast<int64_t>(text.size()));
  EXPECT_NE((*ds)->description().find("built-in text"), std::string::npos);
}

}  // namespace
}  // namespace strata::data
