// Folder-private. SwapDir: this process's private swap folder inside nvme_path,
// "strata-swap-r<rank>-p<pid>-<nonce>" (mode 0700), with an `owner.lock` held by flock for
// the folder's lifetime. The folder is created under a hidden name and renamed once its lock
// is held, so ranks sharing nvme_path never mistake a sibling's new folder for a stale one.
// A folder whose lock can be taken belongs to a process that died without cleaning up
// (killed, crashed): it is reported, never opened as data, and removed when asked; so is a
// hidden folder of a process that died while creating or removing its own. A clean
// destruction removes the folder and everything in it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/nvme_tier.h"
#include "strata/status.h"

namespace strata {

class SwapDir {
 public:
  // Creates `parent` if missing (0700), scans it for stale folders (appended to *stale,
  // each logged with a warning), removes them if remove_stale, then creates ours.
  static StatusOr<std::unique_ptr<SwapDir>> Create(const std::string& parent, int rank, bool remove_stale,
                                                   std::vector<StaleSwapFolder>* stale);
  ~SwapDir();
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return path_; }
  // Creates a new file (0600, O_EXCL) in the folder; O_DIRECT if `direct`. Returns the fd
  // (owned by the caller) or the errno error naming the file.
  StatusOr<int> CreateFile(const std::string& name, bool direct) const;

 private:
  SwapDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

// The bytes of regular files under `path` (not following links).
uint64_t FolderBytes(const std::string& path);

}  // namespace strata
