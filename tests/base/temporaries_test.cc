// Temporary outputs: registered while they are written, removed on every way out but their
// publication; WriteFileAtomically leaves neither a temporary on failure nor a changed mode.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <thread>
#include <chrono>
#include <atomic>
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

// How many paths RemoveTemporaries takes, run in a child process: it is for the way out
// (nothing is made after it), so the test process itself must not call it.
int RemovedInAChild() {
  const pid_t child = ::fork();
  if (child == 0) _exit(static_cast<int>(std::min<size_t>(RemoveTemporaries().size(), 100)));
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
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
  EXPECT_EQ(RemovedInAChild(), 0);  // nothing left registered
}

// In a child process: RemoveTemporaries is for the way out (nothing is made after it).
TEST(Temporaries, RemoveTemporariesTakesEveryRegisteredPath) {
  testing::TempDir dir;
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  std::ofstream(a) << "1";
  fs::create_directory(b);
  RegisterTemporary(a);
  RegisterTemporary(b);
  EXPECT_EQ(RemovedInAChild(), 2);
  EXPECT_TRUE(testing::EntryNames(dir.path()).empty());
  ForgetTemporary(a);  // (this process's registry still lists them)
  ForgetTemporary(b);
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

// A stop's removal (RemoveTemporaries) against a thread about to write a registered temporary:
// that thread used to make the file right after the removal, leaving it behind when the
// process ended; now it waits for the end instead. In a child process, which the removal
// leaves unable to make files.
TEST(Temporaries, NothingIsMadeAfterAStopRemovedTheTemporaries) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/.out.tmp-1-0";
  const pid_t child = ::fork();
  if (child == 0) {
    RegisterTemporary(path);
    std::atomic<bool> go{false};
    std::thread writer([&] {
      while (!go) std::this_thread::yield();
      auto w = DurableWriter::Create(path);  // a write that was under way when the stop came
      (void)w;
    });
    (void)RemoveTemporaries();
    go = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    writer.detach();
    _exit(fs::exists(path) ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the file was made after the removal";
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace strata
