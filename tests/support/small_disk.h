// A file system of a chosen size (a tmpfs mounted on a folder), for the tests of what a full
// disk does to a write; unmounted at destruction. Mounting needs root, as CI and this
// project's machines run: where it fails, mounted() is false and the test skips, saying why.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace strata::testing {

class SmallDisk {
 public:
  // `folder` is created if missing; `bytes` is rounded up to whole 4 KiB pages.
  SmallDisk(const std::string& folder, uint64_t bytes) : path_(folder) {
    std::filesystem::create_directories(folder);
    const std::string size = fmt::format("size={}", (bytes + 4095) / 4096 * 4096);
    mounted_ = ::mount("tmpfs", folder.c_str(), "tmpfs", 0, size.c_str()) == 0;
    if (!mounted_) error_ = errno;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }
  std::string why_not() const { return fmt::format("cannot mount a small tmpfs here (errno {}); needs root", error_); }

 private:
  std::string path_;
  bool mounted_ = false;
  int error_ = 0;
};

}  // namespace strata::testing
