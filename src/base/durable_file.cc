#include "src/base/durable_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <filesystem>

#include "src/base/input_file.h"
#include "src/base/temporaries.h"

namespace strata {

StatusOr<DurableWriter> DurableWriter::Create(const std::string& path) {
  const auto hold = HoldOffStops();  // (it may be a temporary a stop just removed: never made again)
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create '{}'", path);
  return DurableWriter(fd, path);
}

DurableWriter::DurableWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  state_ = XXH3_createState();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

DurableWriter::DurableWriter(DurableWriter&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), written_(o.written_), state_(o.state_) {
  o.fd_ = -1;
  o.state_ = nullptr;
}

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (state_) XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Status DurableWriter::Write(std::span<const std::byte> bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
  size_t done = 0;
  while (done < bytes.size()) {  // short writes are normal; EINTR is retried
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "write to '{}' at offset {}", path_, written_ + done);
    done += static_cast<size_t>(n);
  }
  written_ += done;
  return Status();
}

Status DurableWriter::PWrite(uint64_t offset, std::span<const std::byte> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "write to '{}' at offset {}", path_, offset + done);
    done += static_cast<size_t>(n);
  }
  return Status();
}

Status DurableWriter::Close() {
  if (::fsync(fd_) != 0) return ErrnoError(errno, "fsync of '{}'", path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoError(errno, "close of '{}'", path_);
  return Status();
}

uint64_t DurableWriter::xxh3() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open folder '{}'", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(err, "fsync of folder '{}'", dir);
  return Status();
}

Status WriteFileAtomically(const std::string& path, std::string_view text, const std::string& mode_of) {
  TempPath tmp(TemporaryNameFor(path));
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(tmp.path()));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(text.data(), text.size()))));
  // A rewritten file keeps its mode (a 0600 config stays private).
  const std::string& model = mode_of.empty() ? path : mode_of;
  struct stat st {};
  if (::stat(model.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::chmod(tmp.path().c_str(), st.st_mode & 07777) != 0)
    return ErrnoError(errno, "cannot give '{}' the mode of '{}'", tmp.path(), model);
  STRATA_RETURN_IF_ERROR(w.Close());
  if (::rename(tmp.path().c_str(), path.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", tmp.path(), path);
  tmp.Release();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDir(dir.empty() ? "." : dir);
}

Status WriteDurably(const std::string& path, std::string_view bytes) {
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(path));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  return w.Close();
}

StatusOr<std::string> ReadTextFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  auto b = f.bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));  // a FIFO would block, a device never end
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, "stat of '{}'", path);
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ErrnoError(err, "mmap of '{}' ({} bytes)", path, m.size_);
    }
    m.data_ = p;
  }
  ::close(fd);
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

uint64_t Xxh3(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string HexU64(uint64_t v) { return fmt::format("{:016x}", v); }

StatusOr<std::unique_ptr<FolderLock>> FolderLock::Take(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot create checkpoint folder '{}': {}", dir, ec.message());
  const std::string path = dir + "/.strata.lock";
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot open '{}'", path);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) return ErrnoError(err, "cannot lock '{}'", path);
    return Error(StatusCode::kFailedPrecondition,
                 "checkpoint folder '{}' is in use by another run (pid {}): two runs saving there would delete each "
                 "other's steps; give this run its own --save folder", dir, n > 0 ? std::string(pid, n) : "unknown");
  }
  const std::string me = std::to_string(getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    close(fd);
    return ErrnoError(err, "cannot write '{}'", path);
  }
  return std::unique_ptr<FolderLock>(new FolderLock(fd));
}

FolderLock::~FolderLock() { close(fd_); }

}  // namespace strata
