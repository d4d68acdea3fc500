// TempDir: a fresh folder for one test, removed with everything in it at destruction.
// Lives under $STRATA_TEST_DIR or /var/tmp (a real disk, so O_DIRECT works; /tmp may be tmpfs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The names in `dir` (not below it), sorted: what a test expects a folder to hold, with no
// temporary left beside it.
std::vector<std::string> EntryNames(const std::string& dir);

// Writes `bytes` to `path` (created or replaced): a test's input files.
void WriteBytes(const std::string& path, const std::string& bytes);
// `v` as `width` little-endian bytes: the token, examples and side files' numbers.
std::string LittleEndian(uint64_t v, int width);
// The whole file at `path` ("" if it cannot be read).
std::string ReadBytes(const std::string& path);

// A tmpfs folder (/dev/shm) for the fallback-engine tests, or "" if there is none.
std::string TmpfsDir();

}  // namespace strata::testing
