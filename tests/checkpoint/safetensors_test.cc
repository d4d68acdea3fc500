// The safetensors reader and writer (torch-free): round trip, Hugging Face's header
// conventions, and files that lie about their contents.
#include "src/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/temp_dir.h"

namespace strata::ckpt {
namespace {

TEST(Safetensors, RoundTripKeepsNamesShapesBytesAndMetadata) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/a.safetensors";
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8};
  ASSERT_TRUE(WriteSafetensors(path, {{"x.weight", "F32", {2, 3}, std::as_bytes(std::span(a))},
                                      {"y", "BF16", {2}, std::as_bytes(std::span(b))}},
                               {{"format", "pt"}})
                  .ok());
  // Header length: little-endian u64, header padded to 8 bytes as HF does.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorView* x = f->Find("x.weight");
  ASSERT_TRUE(x);
  EXPECT_EQ(x->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(x->bytes.data(), a.data(), 24), 0);
  EXPECT_EQ(f->Find("y")->dtype, "BF16");
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, TruncatedOrInconsistentFilesAreErrorsNamingTheFile) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/t.safetensors";
  std::vector<float> a(100, 1.f);
  ASSERT_TRUE(WriteSafetensors(path, {{"w", "F32", {100}, std::as_bytes(std::span(a))}}, {}).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("'w'"), std::string::npos) << f.status().message();

  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("shorter than the 8-byte header length"), std::string::npos);
}

// A file written by hand: the 8-byte header length, the header, then `data_bytes` bytes.
std::string WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
  return path;
}

// What Hugging Face's reader refuses, refused here too, naming the tensors: overlapping or
// gapped data_offsets, bytes after the last tensor, a shape whose product wraps around,
// nesting that would overflow a recursive parser, numbers beyond double's range.
TEST(Safetensors, HeadersThatLieAreRefusedNamingTheTensor) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/h.safetensors";
  auto refused = [&](const std::string& header, size_t data_bytes, const std::string& why) {
    auto f = SafetensorsFile::Open(WriteRaw(path, header, data_bytes));
    EXPECT_FALSE(f.ok()) << header;
    if (f.ok()) return;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(f.status().message().find(why), std::string::npos) << f.status().message();
  };
  refused(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24, "'b' starts at data byte 8, not where 'a' ends (byte 16): tensors overlap");
  refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})", 20, "leave a gap");
  refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12, "4 data bytes after the last tensor");
  refused(R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0,
          "do not hold");
  refused(std::string(100000, '[') + std::string(100000, ']'), 0, "nested deeper than 64 levels at byte 64");
  refused(R"({"__metadata__": {"x": 1e999}})", 0, "__metadata__.x: ");
  auto ok = SafetensorsFile::Open(WriteRaw(path, R"({"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
      "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8));
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();  // an empty tensor shares its offset
}

}  // namespace
}  // namespace strata::ckpt
