// Outputs in progress live under temporary names until they are complete (then renamed into
// place). This registry knows them, so that a process stopped by SIGINT or SIGTERM, or ended by
// an error nobody caught, removes them on its way out: an interrupted command leaves behind
// neither a half-written file nor a temporary copy.
#pragma once

#include <shared_mutex>
#include <string>
#include <vector>

namespace strata {

// A temporary path (file or folder) that this process writes; removed by RemoveTemporaries().
// Register it before making it (or while holding HoldOffStops across both).
void RegisterTemporary(const std::string& path);
// The path was renamed into place or removed: no longer this registry's.
void ForgetTemporary(const std::string& path);
// Removes every registered path (folders with their contents) and returns them; for the
// signal watcher and the last-resort error path, on the process's way out. Safe from any
// thread. It first waits for every HoldOffStops() in progress, and from then on every new one
// waits forever: nothing is made after the removal ran.
std::vector<std::string> RemoveTemporaries();

// Held by a thread while it makes an entry on disk that may be (or lie inside) a registered
// temporary (DurableWriter::Create, a temporary folder's mkdir, a rename to a temporary name):
// a stop's removal never runs in the middle, and once a stop has begun the holder waits for
// the process to end instead of making anything the removal would miss. Not recursive.
[[nodiscard]] std::shared_lock<std::shared_mutex> HoldOffStops();

// "DIR/.NAME.tmp-PID-N" beside `path`: unique within the process and across processes, hidden
// from a plain `ls`, and recognisably Strata's.
std::string TemporaryNameFor(const std::string& path);

// A registered temporary owned by a scope: the destructor removes it unless Release() was
// called (once it has been renamed into place). Move-only.
class TempPath {
 public:
  TempPath() = default;
  explicit TempPath(std::string path);
  TempPath(TempPath&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempPath& operator=(TempPath&& o) noexcept;
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  ~TempPath() { Remove(); }

  const std::string& path() const { return path_; }
  void Release();  // it is no longer temporary (renamed into place)
  void Remove();   // removes it now (nothing if released)

 private:
  std::string path_;
};

}  // namespace strata
