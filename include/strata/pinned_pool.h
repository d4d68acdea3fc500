// PinnedPool: a fixed set of equally sized, 4 KiB-aligned host buffers (DeepSpeed's
// buffer_count x buffer_size), allocated and page-locked once at creation and then leased
// without allocation. The lease, PinnedBuffer, returns itself to the pool when destroyed.
//
// Page-locking is done by an injected HostPinner: mlock on a CPU build (subject to
// RLIMIT_MEMLOCK), cudaHostRegister in the CUDA build. If pinning is refused the pool still
// works with ordinary memory and says so once in the log (pinned() reports it).
//
// Threading: Acquire/TryAcquire/release are thread-safe. Acquire blocks while all buffers
// are leased. The pool must outlive its leases (checked at destruction).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "strata/host_pinner.h"
#include "strata/status.h"

namespace strata {


// Page size of host memory. kHuge asks for transparent huge pages (2 MiB) where the kernel
// grants them (THP "always" or "madvise"): fewer TLB misses, and a 1 MiB I/O buffer is one
// physically contiguous segment (in 4 KiB pages it is 256, more than a virtio disk's 254,
// so every such request is split in two). kSmall: plain 4 KiB pages (bench io's A/B).
enum class HostPages { kHuge, kSmall };

// Allocates `bytes` (rounded up to 4 KiB) of 4 KiB-aligned, pre-faulted anonymous memory,
// released with FreeHostMemory. Use at start-up only: first touch costs ~0.5 s/GB here (up
// to ~2 s/GB when the VM's host has taken the memory back).
StatusOr<std::byte*> AllocateHostMemory(size_t bytes, HostPages pages = HostPages::kHuge);
// The same, zero, but faulted on first touch (huge pages still asked for): for memory that
// creation does not use, so that its faults fall in the first step instead of the start-up.
StatusOr<std::byte*> ReserveHostMemory(size_t bytes);
void FreeHostMemory(std::byte* data, size_t bytes);
// Bytes of [data, data+bytes) backed by huge pages (from /proc/self/smaps; 0 if unknown).
uint64_t HugePageBytes(const std::byte* data, size_t bytes);

class PinnedPool;

// A leased buffer: move-only, returned to its pool on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Release(); }

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }  // the pool's buffer_size, bytes
  std::span<std::byte> span() const { return {data_, size_}; }
  int index() const { return index_; }
  bool valid() const { return pool_ != nullptr; }
  PinnedPool* pool() const { return pool_; }  // the pool it returns to (null when invalid)
  void Release();

 private:
  friend class PinnedPool;
  PinnedBuffer(PinnedPool* pool, int index, std::byte* data, size_t size)
      : pool_(pool), index_(index), data_(data), size_(size) {}
  PinnedPool* pool_ = nullptr;
  int index_ = -1;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

class PinnedPool {
 public:
  // buffer_size is rounded up to 4 KiB. `pinner` may be null (no pinning). Fails only if
  // the memory cannot be allocated.
  static StatusOr<std::unique_ptr<PinnedPool>> Create(size_t buffer_count, size_t buffer_size,
                                                      std::unique_ptr<HostPinner> pinner,
                                                      HostPages pages = HostPages::kHuge);
  // The bytes such a pool allocates (buffer_size rounded up to 4 KiB, times the count).
  static size_t RegionBytes(size_t buffer_count, size_t buffer_size);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // Blocks until a buffer is free.
  PinnedBuffer Acquire();
  std::optional<PinnedBuffer> TryAcquire();
  // Blocks until a buffer is free, at most `timeout`; nullopt after that.
  std::optional<PinnedBuffer> AcquireFor(std::chrono::milliseconds timeout);

  size_t buffer_count() const { return count_; }
  size_t buffer_size() const { return size_; }
  bool pinned() const { return pinned_; }
  size_t free_count();
  // The whole region (buffer_count * buffer_size bytes).
  std::span<std::byte> region() const { return {base_, count_ * size_}; }
  // The region as spans of whole buffers, each at most `max_bytes` (at least one buffer):
  // what io_uring registers (at most 1 GiB a span) without a request straddling two spans.
  std::vector<std::span<std::byte>> Regions(size_t max_bytes = size_t{1} << 30) const;

 private:
  friend class PinnedBuffer;
  PinnedPool(std::byte* base, size_t count, size_t size, std::unique_ptr<HostPinner> pinner, bool pinned);
  void Return(int index);

  std::byte* base_;
  size_t count_, size_;
  std::unique_ptr<HostPinner> pinner_;
  bool pinned_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_;
};

}  // namespace strata
