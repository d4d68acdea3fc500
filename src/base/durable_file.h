// Files that survive a crash: written under a temporary name, fsynced, renamed, and the
// folder fsynced, so a reader sees either the old content or the new one, never a torn
// mix. Plus a read-only mapping of a whole file and the xxh3-64 that checkpoints carry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "strata/status.h"

namespace strata {

// A file being written: bytes go out in order; the xxh3-64 of everything written is kept.
// Close() fsyncs and closes; the destructor of an unclosed file closes it without fsync
// (the caller's error path). Move-only.
class DurableWriter {
 public:
  static StatusOr<DurableWriter> Create(const std::string& path);  // O_TRUNC, mode 0644
  DurableWriter(DurableWriter&& o) noexcept;
  DurableWriter& operator=(DurableWriter&&) = delete;
  DurableWriter(const DurableWriter&) = delete;
  ~DurableWriter();

  Status Write(std::span<const std::byte> bytes);
  // Writes at an absolute offset (e.g. a header reserved up front). Not part of xxh3().
  Status PWrite(uint64_t offset, std::span<const std::byte> bytes);
  Status Close();  // fsync + close
  uint64_t bytes_written() const { return written_; }
  uint64_t xxh3() const;  // of all bytes written so far
  const std::string& path() const { return path_; }

 private:
  DurableWriter(int fd, std::string path);
  int fd_ = -1;
  std::string path_;
  uint64_t written_ = 0;
  void* state_ = nullptr;  // XXH3_state_t
};

// A run's exclusive claim on its checkpoint folder (flock on DIR/.strata.lock, which holds
// the owner's pid), held for the run's lifetime: two runs saving to one folder would prune
// each other's steps. Creates the folder if missing; released by the kernel on any exit.
class FolderLock {
 public:
  static StatusOr<std::unique_ptr<FolderLock>> Take(const std::string& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_;
};

// fsync of a folder: makes a rename or a new entry in it durable.
Status FsyncDir(const std::string& dir);
// Writes `text` to `path` through a temporary beside it (TemporaryNameFor; removed on any
// failure or signal) + fsync + rename + fsync of the folder. The file gets the mode of
// `mode_of` when that exists (default: `path` itself, so a replaced file keeps its mode).
Status WriteFileAtomically(const std::string& path, std::string_view text, const std::string& mode_of = "");
// Writes `bytes` to `path` (created or truncated) and fsyncs it; for files inside a temporary
// folder whose publication fsyncs the folder.
Status WriteDurably(const std::string& path, std::string_view bytes);
StatusOr<std::string> ReadTextFile(const std::string& path);

// A whole regular file mapped read-only (empty files map to an empty span; a FIFO, a device
// or a folder is refused). Move-only.
class MappedFile {
 public:
  static StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  ~MappedFile();
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

uint64_t Xxh3(std::span<const std::byte> bytes);
std::string HexU64(uint64_t v);  // 16 lower-case hex digits

}  // namespace strata
