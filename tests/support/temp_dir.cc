#include "support/temp_dir.h"

#include <stdlib.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace strata::testing {

TempDir::TempDir() {
  const char* base = std::getenv("STRATA_TEST_DIR");
  std::string pattern = std::string(base && *base ? base : "/var/tmp") + "/strata-test-XXXXXX";
  std::filesystem::create_directories(std::filesystem::path(pattern).parent_path());
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> EntryNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string TmpfsDir() {
  struct statfs s {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs("/dev/shm", &s) == 0 && s.f_type == kTmpfsMagic) return "/dev/shm";
  return "";
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string LittleEndian(uint64_t v, int width) {
  std::string out;
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return out;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace strata::testing
