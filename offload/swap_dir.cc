#include "swap_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>

#include "strata/log.h"

namespace strata {
namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "strata-swap-";

// This process's live folders, for RemoveThisProcessSwapFolders (a signal ending the run).
std::mutex g_live_mu;
std::set<std::string> g_live;
// Set by RemoveThisProcessSwapFolders: the process is ending on a signal, and a folder made
// after its sweep (another tier still starting up) would outlive it in view.
bool g_stopping = false;

// Out of view first (a hidden name), so sibling ranks scanning nvme_path never see a
// half-removed folder, and a process killed mid-way leaves a hidden ".removing" folder that
// a later sweep judges (IsAbandoned); then remove it, the lock with it. True if gone.
bool RemoveFolder(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const fs::path hidden = p.parent_path() / fmt::format(".{}.removing", p.filename().string());
  const std::string victim = rename(path.c_str(), hidden.c_str()) == 0 ? hidden.string() : path;
  fs::remove_all(victim, ec);
  if (ec) LogWarn("could not remove swap folder '{}': {}", path, ec.message());
  return !ec;
}
constexpr const char* kLockName = "owner.lock";

// True when nobody holds the folder's lock: its owner is gone. A folder appears only with
// its lock held and leaves view before its lock goes, so one without a lock file is not
// judged (it is being removed right now). Nor is one whose lock we took only after it left
// view: opened just before its owner renamed it away, locked just after the owner let go.
// Taken while the same lock file is still in view, the lock was let go without the rename:
// the owner died.
bool IsStale(const fs::path& folder) {
  const fs::path lock = folder / kLockName;
  int fd = open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat held {}, in_view {};
  const bool stale = flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 && stat(lock.c_str(), &in_view) == 0 &&
                     held.st_dev == in_view.st_dev && held.st_ino == in_view.st_ino;
  close(fd);
  return stale;
}

// A hidden folder (".strata-swap-r<rank>-p<pid>-<nonce>", being created, or the same with
// ".removing", being removed), or one in view without its lock file (swept in place by a
// process that died mid-way), outlives its process only if that process died mid-way. Its
// lock is held from just after the folder is made until it is gone, so one whose lock file
// is free and in view (IsStale) is abandoned, once the file is a few seconds old: younger,
// its owner may be between creating the file and locking it. Without a lock file (died in
// that instant, or mid-way through the removal) it is abandoned when the pid in its name is
// gone and it is older than a minute (the age keeps a process of another pid namespace safe);
// one being removed ("...removing") at once, as nothing in it is wanted by anyone (a run
// killed mid-removal and restarted within the minute left it behind otherwise).
bool IsAbandoned(const fs::path& folder, const std::string& name) {
  struct stat lock {};
  if (stat((folder / kLockName).c_str(), &lock) == 0)
    return time(nullptr) - lock.st_mtime > 5 && IsStale(folder);
  const size_t p = name.find("-p", std::char_traits<char>::length(kPrefix));
  if (p == std::string::npos) return false;
  const long pid = std::strtol(name.c_str() + p + 2, nullptr, 10);
  if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) return false;
  struct stat st {};
  if (stat(folder.c_str(), &st) != 0) return false;
  return name.ends_with(".removing") || time(nullptr) - st.st_mtime > 60;
}
}  // namespace

uint64_t FolderBytes(const std::string& path) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

StatusOr<std::unique_ptr<SwapDir>> SwapDir::Create(const std::string& parent, int rank, bool remove_stale,
                                                   std::vector<StaleSwapFolder>* stale) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create swap folder '{}': {}", parent, ec.message());

  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool hidden = name.rfind(std::string(".") + kPrefix, 0) == 0;
    if (!hidden && name.rfind(kPrefix, 0) != 0) continue;
    // In view, a folder without its lock file was being swept in place when its sweeper died
    // (before sweeps renamed first): judged as a hidden one is, by its owner's pid and age.
    const bool locked = fs::exists(it->path() / kLockName);
    if (!it->is_directory() || !(hidden || !locked ? IsAbandoned(it->path(), name) : IsStale(it->path()))) continue;
    StaleSwapFolder s{it->path().string(), FolderBytes(it->path().string()), false};
    if (remove_stale) s.removed = RemoveFolder(s.path);
    LogWarn("swap folder '{}' ({} bytes) was left by a process that did not exit cleanly; its contents are never read{}",
            s.path, s.bytes, s.removed ? " and it has been removed" : "");
    if (stale) stale->push_back(s);
  }
  if (ec) return Error(StatusCode::kIoError, "cannot list swap folder '{}': {}", parent, ec.message());

  // The folder appears under its final name only once its lock is held (created under a
  // hidden name, locked, renamed), so a sibling rank scanning at the same moment can never
  // take a folder being created for a stale one.
  std::random_device rd;
  const std::string leaf = fmt::format("{}r{}-p{}-{:08x}", kPrefix, rank, getpid(), rd());
  const std::string staging = (fs::path(parent) / fmt::format(".{}", leaf)).string();
  const std::string path = (fs::path(parent) / leaf).string();
  // Held from before the folder exists until it is registered: a signal's cleanup
  // (RemoveThisProcessSwapFolders) waits for it instead of missing a folder that is already
  // in view but not yet in g_live.
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (g_stopping)
    return Error(StatusCode::kFailedPrecondition, "not creating a swap folder in '{}': the process is stopping", parent);
  if (mkdir(staging.c_str(), 0700) != 0) return ErrnoError(errno, "cannot create swap folder '{}'", staging);
  const std::string lock_path = staging + "/" + kLockName;
  int lock_fd = open(lock_path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0 || rename(staging.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError(errno, "cannot create and lock swap folder '{}'", path);
    if (lock_fd >= 0) close(lock_fd);
    fs::remove_all(staging, ec);
    return s;
  }
  g_live.insert(path);
  return std::unique_ptr<SwapDir>(new SwapDir(path, lock_fd));
}

SwapDir::~SwapDir() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    if (g_live.erase(path_)) RemoveFolder(path_);  // else a signal's cleanup removed it already
  }
  close(lock_fd_);  // the lock last: the folder is gone before anyone may judge it stale
}

std::vector<std::string> RemoveThisProcessSwapFolders() {
  std::lock_guard<std::mutex> lock(g_live_mu);
  g_stopping = true;
  std::vector<std::string> removed(g_live.begin(), g_live.end());
  for (const std::string& path : removed) RemoveFolder(path);
  g_live.clear();
  return removed;
}

StatusOr<int> SwapDir::CreateFile(const std::string& name, bool direct) const {
  const std::string file = path_ + "/" + name;
  int fd = open(file.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
  if (fd < 0) return ErrnoError(errno, "cannot create swap file '{}'{}", file, direct ? " with O_DIRECT" : "");
  return fd;
}

}  // namespace strata
