#include "src/base/temporaries.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

namespace strata {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::vector<std::string>& Paths() {
  static std::vector<std::string> paths;
  return paths;
}
std::shared_mutex& Making() {
  static std::shared_mutex mu;
  return mu;
}

}  // namespace

void RegisterTemporary(const std::string& path) {
  std::lock_guard<std::mutex> lock(Mu());
  Paths().push_back(path);
}

void ForgetTemporary(const std::string& path) {
  std::lock_guard<std::mutex> lock(Mu());
  auto& p = Paths();
  p.erase(std::remove(p.begin(), p.end(), path), p.end());
}

std::shared_lock<std::shared_mutex> HoldOffStops() { return std::shared_lock<std::shared_mutex>(Making()); }

std::vector<std::string> RemoveTemporaries() {
  // Never released: the process is ending, and whatever would make an entry now waits for that.
  Making().lock();
  std::vector<std::string> taken;
  {
    std::lock_guard<std::mutex> lock(Mu());
    taken.swap(Paths());
  }
  for (const std::string& path : taken) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  return taken;
}

std::string TemporaryNameFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "out/" names "out"
  return (p.parent_path() / fmt::format(".{}.tmp-{}-{}", p.filename().string(), ::getpid(), counter++)).string();
}

TempPath::TempPath(std::string path) : path_(std::move(path)) { RegisterTemporary(path_); }

TempPath& TempPath::operator=(TempPath&& o) noexcept {
  if (this != &o) {
    Remove();
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

void TempPath::Release() {
  if (path_.empty()) return;
  ForgetTemporary(path_);
  path_.clear();
}

void TempPath::Remove() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  ForgetTemporary(path_);
  path_.clear();
}

}  // namespace strata
