// NvmeTier: one swap file per rank, in a private folder under nvme_path, holding named
// extents (one per tensor). Moves whole tensors between host memory and their extent.
//
// - Extents: a tensor of >= block_size bytes starts at a block_size-aligned offset, a
//   smaller one at a 4 KiB-aligned offset; capacity is the size rounded up to 4 KiB. Space
//   is reserved with fallocate at Allocate, so a full disk is reported there, naming the
//   tensor, not in the middle of a step.
// - I/O: O_DIRECT, split into block_size requests with at most queue_depth in flight, through
//   io_uring (registered file and buffers) or, where io_uring or O_DIRECT is refused, plain
//   pread/pwrite (one log line says which and why). Host memory at any address and tensors
//   of any size work: aligned whole blocks go straight from/to the caller's memory, the rest
//   (unaligned starts, the tail) through the tier's own aligned staging buffers.
// - Every completion is checked; short transfers are resubmitted; an error names the
//   tensor, the file, the offset and the errno; a failed write leaves that tensor invalid
//   (reads of it are refused) and every other extent untouched.
// - Integrity: with verify_checksums each write records an xxh3-64 of the tensor and each
//   read verifies it, so a swap file truncated or overwritten behind the store's back is an
//   error naming the tensor (kDataLoss), never silently wrong data.
// - Crash safety: swap folders left by processes that died are reported at Open (and
//   removed when remove_stale); they are never read. A clean shutdown removes ours.
//
// Threading: Allocate/Free/Write/Read may be called from any thread; one internal I/O thread
// drives the engine. A tensor must not be written while another write or read of it is in
// flight (checked).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/extent_tier.h"
#include "strata/io_engine.h"
#include "strata/status.h"
#include "strata/event.h"

namespace strata {

enum class IoEngineKind { kAuto, kUring, kPread };

struct NvmeTierOptions {
  std::string dir;                   // nvme_path: the parent of the private swap folder
  int rank = 0;
  uint32_t block_size = 1u << 20;    // aio.block_size: bytes per request (multiple of 4 KiB)
  unsigned queue_depth = 32;         // aio.queue_depth: requests in flight
  bool verify_checksums = true;      // xxh3 per extent, verified on read
  bool direct_io = true;             // O_DIRECT; false (or a folder refusing it) means buffered I/O via pread
  bool remove_stale = true;          // delete swap folders of dead processes (they are reported either way)
  IoEngineKind engine = IoEngineKind::kAuto;
  // Host memory to register with io_uring for zero-copy I/O (e.g. the PinnedPool's
  // regions; see also RegisterBuffers). Each span at most 1 GiB (the kernel's limit).
  std::vector<std::span<std::byte>> registered_buffers;
  // Observes every finished tensor transfer (on the I/O thread; keep it cheap): for traces.
  std::function<void(IoOp op, const std::string& tensor, uint64_t bytes, std::chrono::steady_clock::time_point start,
                     std::chrono::steady_clock::time_point end)>
      on_io;
  // Tests: wraps the chosen engine (fault injection).
  std::function<std::unique_ptr<IoEngine>(std::unique_ptr<IoEngine>)> wrap_engine;
};

// A swap folder left by a process that died without cleaning up (see Open).
struct StaleSwapFolder {
  std::string path;
  uint64_t bytes = 0;
  bool removed = false;
};

// Removes every swap folder this process holds now, whatever uses their files (for a
// process about to exit on a signal: nothing is left on disk); returns their paths. The
// tiers' later destruction removes nothing more, and no folder is created after it.
std::vector<std::string> RemoveThisProcessSwapFolders();

struct NvmeTierStats {
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  uint64_t requests = 0;
  uint64_t resubmissions = 0;  // short or EAGAIN completions retried
  uint64_t staged_requests = 0;  // went through a staging buffer
  // Bytes moved from or into memory not registered with the tier (options.registered_buffers,
  // RegisterBuffers): io_uring pins their pages per request instead of once.
  uint64_t unregistered_bytes = 0;
};

// The swap file as an ExtentTier (extent_tier.h).
class NvmeTier final : public ExtentTier {
 public:
  static StatusOr<std::unique_ptr<NvmeTier>> Open(NvmeTierOptions options);
  // Waits for in-flight I/O, then removes the swap folder.
  ~NvmeTier() override;

  // Reserves an extent for `bytes` (> 0). kResourceExhausted when the disk is full. `packed`:
  // 4 KiB-aligned whatever its size (a part of a tensor cut into many, which would waste up
  // to a block each aligned to block_size).
  StatusOr<ExtentId> Allocate(const std::string& name, uint64_t bytes, bool packed = false) override;
  // Returns the extent's space for reuse. No I/O of it may be in flight (checked).
  void Free(ExtentId id);

  // Adds host memory that transfers will use (pinned pools created after the tier) to the
  // buffers registered with io_uring, so its requests skip the per-request page pinning.
  // Waits for in-flight I/O. Best effort: a refusal is logged and I/O still works.
  Status RegisterBuffers(std::span<const std::span<std::byte>> regions) override;

  // Writes src (exactly the extent's bytes) to the extent. `src` must stay valid until the
  // event completes.
  Event Write(ExtentId id, std::span<const std::byte> src) override;
  // Reads the extent into dst (exactly its bytes). Refused if the extent holds no valid
  // data (never written, or its last write failed).
  Event Read(ExtentId id, std::span<std::byte> dst) override;

  const std::string& name(ExtentId id) const;
  uint64_t bytes(ExtentId id) const;
  uint64_t file_offset(ExtentId id) const;
  const std::string& file_path() const;
  const std::string& folder() const;
  const char* engine_name() const;
  bool direct_io() const;
  uint64_t file_bytes() const;  // the swap file's reserved size
  uint64_t bytes_on_disk() const;  // the blocks the file system allocated to the swap file
  NvmeTierStats stats() const;
  const std::vector<StaleSwapFolder>& stale_folders() const;

  struct Impl;

 private:
  explicit NvmeTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
