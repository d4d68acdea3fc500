// Temporary outputs: registered while they are written, removed on every way out but their
// publication; WriteFileAtomically leaves neither a temporary on failure nor a changed mode.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/base/temporaries.h"
#include "src/base/durable_file.h"
#include "support/small_disk.h"
#include "support/temp_dir.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

unsigned Mode(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mode & 07777;
}

TEST(Temporaries, NamesAreHiddenUniqueAndBesideTheOutput) {
  const std::string a = TemporaryNameFor("/x/out/model"), b = TemporaryNameFor("/x/out/model/");
  EXPECT_EQ(fs::path(a).parent_path(), "/x/out");
  EXPECT_EQ(fs::path(b).parent_path(), "/x/out");
  EXPECT_EQ(fs::path(a).filename().string().rfind(".model.tmp-", 0), 0u) << a;
  EXPECT_NE(a, b);
}

TEST(Temporaries, AScopeRemovesItsTemporaryUnlessReleased) {
  testing::TempDir dir;
  const std::string gone = dir.path() + "/gone", kept = dir.path() + "/kept";
  {
    TempPath t(gone);
    fs::create_directories(gone + "/sub");
    std::ofstream(gone + "/sub/file") << "x";
    TempPath k(kept);
    std::ofstream(kept) << "y";
    k.Release();
  }
  EXPECT_FALSE(fs::exists(gone));
  EXPECT_TRUE(fs::exists(kept));
  EXPECT_TRUE(RemoveTemporaries().empty());  // nothing left registered
}

TEST(Temporaries, RemoveTemporariesTakesEveryRegisteredPath) {
  testing::TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  std::ofstream(a) << "1";
  fs::create_directory(b);
  RegisterTemporary(a);
  RegisterTemporary(b);
  const std::vector<std::string> removed = RemoveTemporaries();
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_TRUE(testing::EntryNames(dir.path()).empty());
}

TEST(AtomicWrite, AReplacedFileKeepsItsModeAndNoTemporaryStays) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/ds_config.json";
  std::ofstream(path) << "{}";
  ::chmod(path.c_str(), 0600);
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\": 1}").ok());
  EXPECT_EQ(Read(path), "{\"a\": 1}");
  EXPECT_EQ(Mode(path), 0600u);
  ASSERT_TRUE(WriteFileAtomically(path + ".bak", "{}", /*mode_of=*/path).ok());
  EXPECT_EQ(Mode(path + ".bak"), 0600u);
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"ds_config.json", "ds_config.json.bak"}));
}

TEST(AtomicWrite, AFullDiskLeavesTheOldFileAndNoTemporary) {
  testing::TempDir dir;
  testing::SmallDisk disk(dir.path() + "/disk", 64 << 10);
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const std::string path = disk.path() + "/ds_config.json";
  std::ofstream(path) << "{\"old\": true}";
  const Status s = WriteFileAtomically(path, std::string(1 << 20, ' '));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(Read(path), "{\"old\": true}");
  EXPECT_EQ(testing::EntryNames(disk.path()), (std::vector<std::string>{"ds_config.json"}));
}

TEST(AtomicWrite, MappedFileRefusesAFifo) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto m = MappedFile::Open(fifo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("FIFO"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace strata
