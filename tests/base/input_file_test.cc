// Reading files nobody vouches for: only regular files (a FIFO refused at once instead of a
// hang, a device instead of an endless read), bounded sizes, errors that stay short.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "src/base/input_file.h"
#include "src/base/json_text.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

TEST(InputFile, AFifoIsRefusedAtOnceNamingIt) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = ReadInputFile(fifo, 1 << 20, "a config file");  // no writer: a plain open would block here
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'" + fifo + "' is a FIFO (named pipe), not a regular file"), std::string::npos)
      << r.status().ToString();
  EXPECT_FALSE(OpenRegularFile(fifo).ok());
}

TEST(InputFile, FoldersAndDevicesAreRefused) {
  testing::TempDir dir;
  auto folder = ReadInputFile(dir.path(), 1 << 20, "a config file");
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("is a folder"), std::string::npos) << folder.status().ToString();
  auto zero = ReadInputFile("/dev/zero", 1 << 20, "a config file");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("is a character device"), std::string::npos) << zero.status().ToString();
  auto missing = ReadInputFile(dir.path() + "/none.json", 1 << 20, "a config file");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("none.json"), std::string::npos);
}

TEST(InputFile, AFileLargerThanItsKindCanBeIsRefusedWithoutQuotingIt) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/latest";
  std::ofstream(path) << std::string(50 << 10, 'x');
  auto r = ReadInputFile(path, 4096, "a 'latest' file");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is 51200 bytes, more than a 'latest' file can be (4096 bytes)"),
            std::string::npos) << r.status().ToString();
  EXPECT_LT(r.status().message().size(), 300u);
  auto fits = ReadInputFile(path, 51200, "a 'latest' file");
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->size(), 51200u);
}

TEST(InputFile, QuotesStayShortAndPrintable) {
  EXPECT_EQ(QuoteForError("step_1"), "\"step_1\"");
  EXPECT_EQ(QuoteForError(std::string("a\nb\x01", 4)), "\"a\\x0ab\\x01\"");
  const std::string q = QuoteForError(std::string(1000, 'y'), 10);
  EXPECT_EQ(q, "\"yyyyyyyyyy\" ... (1000 bytes)");
}

TEST(JsonText, NestingBeyondTheLimitIsAnErrorNotACrash) {
  const std::string deep = "{\"extra\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto r = ParseJsonText(deep, "'config.json'");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'config.json': nested deeper than 64 levels at byte 73"), std::string::npos)
      << r.status().ToString();
  auto ordered = ParseOrderedJsonText(deep, "'config.json'");
  EXPECT_FALSE(ordered.ok());
  EXPECT_TRUE(ParseJsonText(std::string(64, '[') + std::string(64, ']'), "x").ok());
}

TEST(JsonText, ReadJsonFileNamesTheFile) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/index.json";
  std::ofstream(path) << "{ nope";
  auto r = ReadJsonFile(path, 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'" + path + "': not valid JSON"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace strata
