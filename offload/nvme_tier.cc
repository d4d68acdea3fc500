#include "strata/nvme_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "hash_workers.h"
#include "io_pump.h"
#include "swap_dir.h"
#include "strata/check.h"
#include "strata/log.h"
#include "strata/pinned_pool.h"

namespace strata {
namespace {

constexpr uint64_t kAlign = IoPump::kAlign;
uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

enum class ExtentState { kEmpty, kWriting, kValid, kFailed };

// xxh3-64 of each `block`-sized piece of `bytes` (the last one shorter): the pieces the pump
// splits a transfer into, so a read can check each as it lands.
std::vector<uint64_t> PieceSums(std::span<const std::byte> bytes, uint64_t block) {
  std::vector<uint64_t> sums;
  sums.reserve((bytes.size() + block - 1) / block);
  for (uint64_t at = 0; at < bytes.size(); at += block)
    sums.push_back(XXH3_64bits(bytes.data() + at, std::min<uint64_t>(block, bytes.size() - at)));
  return sums;
}

struct Extent {
  std::string name;
  uint64_t offset = 0, bytes = 0, capacity = 0;
  // xxh3-64 of each block-sized piece (verify_checksums); replaced whole by each write, so
  // reads in flight keep the one they started with, without a copy.
  std::shared_ptr<const std::vector<uint64_t>> sums;
  ExtentState state = ExtentState::kEmpty;
  int readers = 0;  // reads in flight
  bool live = false;
};

}  // namespace

struct NvmeTier::Impl {
  NvmeTierOptions options;
  std::vector<StaleSwapFolder> stale;
  std::unique_ptr<SwapDir> dir;
  std::string file_path;
  int fd = -1;
  bool direct = false;
  std::byte* staging = nullptr;
  size_t staging_bytes = 0;
  std::unique_ptr<IoPump> pump;
  std::unique_ptr<HashWorkers> hashers;  // verify_checksums: reads' pieces (Note [Verifying reads])
  std::vector<std::span<std::byte>> registered;  // every region registered with the engine (under mu)
  uint64_t unregistered_bytes = 0;                // (under mu)

  mutable std::mutex mu;  // guards everything below
  std::vector<Extent> extents;
  std::map<uint64_t, uint64_t> holes;  // offset -> capacity, space freed for reuse
  uint64_t end = 0;                    // reserved size of the file

  ~Impl() {
    pump.reset();     // drains in-flight I/O first
    hashers.reset();  // then the verification of its last pieces
    if (fd >= 0) close(fd);
    FreeHostMemory(staging, staging_bytes);
  }

  // Counts a transfer's bytes when its memory lies outside every registered region.
  void NoteMemory(const std::byte* p, uint64_t n) {
    for (const auto& r : registered)
      if (p >= r.data() && p + n <= r.data() + r.size()) return;
    unregistered_bytes += n;
  }

  Extent& Get(ExtentId id) {
    STRATA_CHECK(id < extents.size() && extents[id].live) << "unknown extent " << id;
    return extents[id];
  }

  // First fit among the holes, else the end of the file. Holes are not coalesced: the
  // store's tensors are registered once and mostly live for the whole run.
  uint64_t Place(uint64_t capacity, uint64_t align, bool* grows) {
    for (auto it = holes.begin(); it != holes.end(); ++it) {
      const uint64_t start = RoundUp(it->first, align), hole_end = it->first + it->second;
      if (start + capacity > hole_end) continue;
      const uint64_t hole_start = it->first;
      holes.erase(it);
      if (start > hole_start) holes[hole_start] = start - hole_start;
      if (start + capacity < hole_end) holes[start + capacity] = hole_end - start - capacity;
      *grows = false;
      return start;
    }
    *grows = true;
    return RoundUp(end, align);
  }
};

NvmeTier::NvmeTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NvmeTier::~NvmeTier() = default;

StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Open(NvmeTierOptions options) {
  if (options.dir.empty()) return InvalidArgument("nvme_path is empty: name a folder on the NVMe drive");
  if (options.block_size == 0 || options.block_size % kAlign != 0)
    return InvalidArgument("aio.block_size must be a positive multiple of 4096 (got {})", options.block_size);
  if (options.queue_depth == 0 || options.queue_depth > 4096)
    return InvalidArgument("aio.queue_depth must be in [1, 4096] (got {})", options.queue_depth);

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  STRATA_ASSIGN_OR_RETURN(impl->dir, SwapDir::Create(options.dir, options.rank, options.remove_stale, &impl->stale));
  impl->file_path = impl->dir->path() + "/swap.bin";

  // O_DIRECT first; tmpfs and some file systems refuse it (EINVAL).
  std::string why_fallback = "direct_io is off";
  auto fd = options.direct_io ? impl->dir->CreateFile("swap.bin", /*direct=*/true)
                              : StatusOr<int>(Status(StatusCode::kUnavailable, why_fallback));
  if (fd.ok()) {
    impl->direct = true;
  } else {
    if (options.direct_io) why_fallback = fd.status().message();
    unlink(impl->file_path.c_str());
    fd = impl->dir->CreateFile("swap.bin", /*direct=*/false);
    if (!fd.ok()) return fd.status();
  }
  impl->fd = *fd;

  std::unique_ptr<IoEngine> engine;
  if (options.engine == IoEngineKind::kPread || !impl->direct) {
    if (!impl->direct)
      LogWarn("swap folder '{}' without O_DIRECT ({}); using the buffered pread/pwrite engine", options.dir, why_fallback);
    engine = MakePreadEngine(options.queue_depth);
  } else {
    auto uring = MakeUringEngine(options.queue_depth);
    if (uring.ok()) {
      engine = std::move(uring).value();
    } else if (options.engine == IoEngineKind::kUring) {
      return uring.status();
    } else {
      LogWarn("{}; using the pread/pwrite engine", uring.status().message());
      engine = MakePreadEngine(options.queue_depth);
    }
  }
  if (options.wrap_engine) engine = options.wrap_engine(std::move(engine));

  // Staging for unaligned pieces: a few blocks are enough, since aligned blocks bypass it.
  const size_t staging_count = std::min<size_t>(options.queue_depth, 8);
  impl->staging_bytes = staging_count * options.block_size;
  STRATA_ASSIGN_OR_RETURN(impl->staging, AllocateHostMemory(impl->staging_bytes));

  const int fds[] = {impl->fd};
  STRATA_RETURN_IF_ERROR(engine->RegisterFiles(fds));
  impl->registered = options.registered_buffers;
  impl->registered.push_back({impl->staging, impl->staging_bytes});
  STRATA_RETURN_IF_ERROR(engine->RegisterBuffers(impl->registered));

  LogDebug("NVMe tier: {} ({}; {} engine, block {} B, queue depth {})", impl->file_path,
           impl->direct ? "O_DIRECT" : "buffered", engine->name(), options.block_size, options.queue_depth);
  // Two hashers keep up with a fast drive (xxh3 runs at 6-9 GB/s on one core here).
  if (options.verify_checksums)
    impl->hashers = std::make_unique<HashWorkers>(std::min(2u, std::thread::hardware_concurrency()));
  impl->pump = std::make_unique<IoPump>(std::move(engine), impl->file_path, options.block_size, impl->staging,
                                        staging_count);
  return std::unique_ptr<NvmeTier>(new NvmeTier(std::move(impl)));
}

StatusOr<ExtentId> NvmeTier::Allocate(const std::string& name, uint64_t bytes, bool packed) {
  if (bytes == 0) return InvalidArgument("tensor '{}' has 0 bytes", name);
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const uint64_t capacity = RoundUp(bytes, kAlign);
  const uint64_t align = bytes >= m.options.block_size && !packed ? m.options.block_size : kAlign;
  bool grows = false;
  const uint64_t offset = m.Place(capacity, align, &grows);
  if (grows) {
    // Reserve the space now so a full disk is an error here, naming the tensor.
    int rc = posix_fallocate(m.fd, static_cast<off_t>(offset), static_cast<off_t>(capacity));
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(m.fd, static_cast<off_t>(offset + capacity)) ? errno : 0;
    if (rc != 0)
      return ErrnoError(rc, "cannot reserve {} bytes for tensor '{}' in swap file '{}' at offset {}", capacity, name,
                        m.file_path, offset);
    if (offset > m.end) m.holes[m.end] = offset - m.end;  // alignment gap, reusable by small tensors
    m.end = offset + capacity;
  }
  Extent e;
  e.name = name;
  e.offset = offset;
  e.bytes = bytes;
  e.capacity = capacity;
  e.live = true;
  m.extents.push_back(std::move(e));
  return static_cast<ExtentId>(m.extents.size() - 1);
}

void NvmeTier::Free(ExtentId id) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  Extent& e = m.Get(id);
  STRATA_CHECK(e.state != ExtentState::kWriting && e.readers == 0) << "freeing tensor '" << e.name << "' with I/O in flight";
  m.holes[e.offset] = e.capacity;
  e.live = false;
}

Status NvmeTier::RegisterBuffers(std::span<const std::span<std::byte>> regions) {
  Impl& m = *impl_;
  return m.pump->RunOnPumpThread([&](IoEngine& engine) {
    std::vector<std::span<std::byte>> all;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.registered.insert(m.registered.end(), regions.begin(), regions.end());
      all = m.registered;
    }
    return engine.RegisterBuffers(all);
  });
}

Event NvmeTier::Write(ExtentId id, std::span<const std::byte> src) {
  Impl& m = *impl_;
  IoJob job;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    Extent& e = m.Get(id);
    STRATA_CHECK(src.size() == e.bytes) << "write of " << src.size() << " bytes to tensor '" << e.name << "' of "
                                        << e.bytes << " bytes";
    STRATA_CHECK(e.state != ExtentState::kWriting && e.readers == 0)
        << "tensor '" << e.name << "' written while another write or read of it is in flight";
    e.state = ExtentState::kWriting;
    m.NoteMemory(src.data(), src.size());
    job = IoJob{IoOp::kWrite, const_cast<std::byte*>(src.data()), e.bytes, e.offset, "tensor '" + e.name + "'", {}, {}};
  }
  // Hash in the caller's thread, before the bytes leave: the pump thread stays on I/O.
  std::shared_ptr<const std::vector<uint64_t>> sums;
  if (m.options.verify_checksums) sums = std::make_shared<const std::vector<uint64_t>>(PieceSums(src, m.options.block_size));
  auto event = std::make_shared<PartsEventState>(1);
  const auto start = std::chrono::steady_clock::now();
  job.on_done = [&m, id, sums = std::move(sums), event, start](const Status& s) mutable {
    std::string name;
    uint64_t bytes;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      Extent& e = m.extents[id];
      e.state = s.ok() ? ExtentState::kValid : ExtentState::kFailed;
      e.sums = std::move(sums);
      if (m.options.on_io) name = e.name;
      bytes = e.bytes;
    }
    if (m.options.on_io) m.options.on_io(IoOp::kWrite, name, bytes, start, std::chrono::steady_clock::now());
    event->CompletePart(s);
  };
  m.pump->Enqueue(std::move(job));
  return Event(event);
}

// Note [Verifying reads]: a read's pieces are hashed as they land, by the hash workers, while
// the rest of the read (and the reads queued behind it) are still on the wire; its event
// completes when the I/O and every piece's check are done. Hashing in the waiting thread
// after the whole tensor had arrived made the hash a tail after the I/O: with a pass's
// requests all in flight at once (8 MiB x 64 over 256 MiB here) the reads ran at 0.7x of
// fio's. The pump thread never hashes, so a queue of depth 1 is refilled at once.
Event NvmeTier::Read(ExtentId id, std::span<std::byte> dst) {
  Impl& m = *impl_;
  IoJob job;
  std::shared_ptr<const std::vector<uint64_t>> sums;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    Extent& e = m.Get(id);
    STRATA_CHECK(dst.size() == e.bytes) << "read of " << dst.size() << " bytes from tensor '" << e.name << "' of "
                                        << e.bytes << " bytes";
    STRATA_CHECK(e.state != ExtentState::kWriting) << "tensor '" << e.name << "' read while a write of it is in flight";
    if (e.state != ExtentState::kValid)
      return Event::Failed(Error(StatusCode::kFailedPrecondition, "tensor '{}' holds no valid data in '{}' ({})", e.name,
                                  m.file_path, e.state == ExtentState::kFailed ? "its last write failed" : "never written"));
    e.readers++;
    m.NoteMemory(dst.data(), dst.size());
    if (m.options.verify_checksums) sums = e.sums;
    name = e.name;
    job = IoJob{IoOp::kRead, dst.data(), e.bytes, e.offset, "tensor '" + e.name + "'", {}, {}};
  }
  const int pieces = sums ? static_cast<int>(sums->size()) : 0;
  // One part for the I/O, one per piece's check.
  auto event = std::make_shared<PartsEventState>(1 + pieces);
  auto posted = std::make_shared<int>(0);  // pieces handed to the hashers (pump thread only)
  if (sums) {
    const uint64_t block = m.options.block_size;
    const uint64_t file_offset = job.file_offset;
    job.on_piece = [&m, dst, sums, event, posted, name, block, file_offset](uint64_t at, uint32_t len) {
      ++*posted;
      m.hashers->Post([&m, dst, sums, event, name, block, file_offset, at, len] {
        if (XXH3_64bits(dst.data() + at, len) == (*sums)[at / block]) return event->CompletePart(Status());
        event->CompletePart(Error(StatusCode::kDataLoss, "checksum mismatch reading tensor '{}' ({} bytes) from swap "
                                   "file '{}' at offset {} ({} bytes): the file was modified or truncated behind the "
                                   "store's back", name, dst.size(), m.file_path, file_offset + at, len));
      });
    };
  }
  const auto start = std::chrono::steady_clock::now();
  job.on_done = [&m, id, event, posted, pieces, start, name, bytes = job.bytes](const Status& s) {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.extents[id].readers--;
    }
    if (m.options.on_io) m.options.on_io(IoOp::kRead, name, bytes, start, std::chrono::steady_clock::now());
    // Pieces that never arrived (the read failed) have nothing to check.
    for (int i = *posted; i < pieces; ++i) event->CompletePart(Status());
    event->CompletePart(s);
  };
  m.pump->Enqueue(std::move(job));
  return Event(event);
}

const std::string& NvmeTier::name(ExtentId id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Get(id).name;
}
uint64_t NvmeTier::bytes(ExtentId id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Get(id).bytes;
}
uint64_t NvmeTier::file_offset(ExtentId id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Get(id).offset;
}
const std::string& NvmeTier::file_path() const { return impl_->file_path; }
const std::string& NvmeTier::folder() const { return impl_->dir->path(); }
const char* NvmeTier::engine_name() const { return impl_->pump->engine().name(); }
bool NvmeTier::direct_io() const { return impl_->direct; }
uint64_t NvmeTier::bytes_on_disk() const {
  struct stat st {};
  return fstat(impl_->fd, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}
uint64_t NvmeTier::file_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->end;
}
NvmeTierStats NvmeTier::stats() const {
  NvmeTierStats st = impl_->pump->stats();
  std::lock_guard<std::mutex> lock(impl_->mu);
  st.unregistered_bytes = impl_->unregistered_bytes;
  return st;
}
const std::vector<StaleSwapFolder>& NvmeTier::stale_folders() const { return impl_->stale; }

}  // namespace strata
