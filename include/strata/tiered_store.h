// TieredStore: owns the placement of every shard tensor (fp32 master, Adam m and v, bf16
// working copy, ...) in its home tier, moves it between the caller's host memory and that
// home asynchronously, and owns every write still in flight.
//
// Tiers: kCpu keeps the tensor in host memory owned by the store, page-locked unless it is
// registered kPageable (a move is a memcpy, done in the calling thread); kNvme keeps it in the rank's swap file (NvmeTier:
// O_DIRECT, io_uring, checksummed). Each tier has a byte budget fixed at creation; a
// registration that would exceed it fails with the numbers, before anything is allocated.
// All memory of the kCpu tier is allocated at Register (start-up), never during a step.
//
// One residency state per tensor, owned here: kZero (registered, never written: known to be
// all zeros without storing them, Note [Known zero]), kResident (its home holds the last
// write, or will once the write in flight completes), kFailed (the last write failed: reads
// are refused, naming the tensor).
//
// Write-backs (Note [Write-backs]): WriteBack() takes the pinned buffer holding the bytes
// and keeps it until the write completes; the buffer then goes back to its pool. A Write()
// of a tensor first waits for that tensor's write-back in flight; a Read() copies from its
// buffer instead, so a caller never sees stale bytes nor waits for the disk to have them. When a pool has no free buffer, AcquireBuffer() waits for the
// oldest write-back holding one of its buffers. Finished write-backs are retired (leases
// released, failures recorded) whenever the store is called.
//
// Threading: all methods are thread-safe; many operations may be in flight at once, for
// different tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "strata/extent_tier.h"
#include "strata/tier.h"
#include "strata/nvme_tier.h"
#include "strata/pinned_pool.h"
#include "strata/status.h"
#include "strata/event.h"

namespace strata {

// The store keeps Tier::kCpu and Tier::kNvme (strata/tier.h); kDevice is no tier of its.
const char* TierName(Tier tier);

// Whether a kCpu tensor's memory is page-locked (when the store pins its cpu tier at all).
// Only memory a device copies from or to gains by it; locking costs a first touch of every
// page at Register (0.5-2 s per GB on a VM) and, on a GPU, cudaHostRegister's time.
enum class HostPinning { kPageLocked, kPageable };

struct TieredStoreOptions {
  uint64_t cpu_budget_bytes = UINT64_MAX;   // bytes the kCpu tier may hold
  uint64_t nvme_budget_bytes = UINT64_MAX;  // bytes the kNvme tier may hold
  bool pin_cpu_tier = true;                 // page-lock the kCpu tier's memory (offload_*.pin_memory)
  // How to page-lock it: mlock when null; cudaHostRegister for a GPU (fast, async copies).
  std::shared_ptr<HostPinner> cpu_pinner;
  bool enable_nvme = false;                 // open an NvmeTier with `nvme`
  NvmeTierOptions nvme;
  // A tier of another kind as the kNvme home (extent_tier.h: GPUDirect storage, a second
  // drive), instead of the swap file; enable_nvme and `nvme` are then not used.
  std::shared_ptr<ExtentTier> nvme_tier;
  // Observes every time a caller blocked on a write-back (what it waited for, e.g. "write-back
  // block3.working"; start and end): for traces.
  std::function<void(const std::string& what, std::chrono::steady_clock::time_point start,
                     std::chrono::steady_clock::time_point end)>
      on_wait;
};

// Names a registered tensor; cheap to copy.
struct TensorHandle {
  uint32_t index = UINT32_MAX;
  bool valid() const { return index != UINT32_MAX; }
};

class TieredStore {
 public:
  static StatusOr<std::unique_ptr<TieredStore>> Create(TieredStoreOptions options);
  ~TieredStore();

  // Registers a tensor of `bytes` bytes whose home is `home`. Names must be unique.
  // kResourceExhausted if the tier's budget (or the disk) cannot hold it. `pinning` matters
  // only for kCpu. `parts`: where the tensor's parts begin (bytes, ascending, the first 0), or
  // empty for one part. On NVMe each part is its own extent, with its own checksums, so that
  // ReadParts reads some without the others (Note [Expert-aware fetching]: a layer's experts).
  StatusOr<TensorHandle> Register(const std::string& name, uint64_t bytes, Tier home,
                                  HostPinning pinning = HostPinning::kPageLocked, std::vector<uint64_t> parts = {});

  // Copies src (exactly the tensor's bytes) to the tensor's home, after the tensor's
  // write-back in flight (if any). `src` must stay valid and unchanged until the event
  // completes.
  Event Write(TensorHandle t, std::span<const std::byte> src);
  // Writes the first bytes(t) bytes of `lease` to the tensor's home and keeps the lease
  // until the write has completed (Note [Write-backs]). The returned event may be dropped.
  Event WriteBack(TensorHandle t, PinnedBuffer lease);
  // Copies the tensor from its home into dst (exactly its bytes); while a write-back of it
  // is in flight, from that write-back's buffer instead (no wait, no disk read). A tensor
  // never written reads as zeros, with no I/O (the event is done on return). Refused for
  // a tensor whose last write failed.
  Event Read(TensorHandle t, std::span<std::byte> dst);
  // Read() of the listed parts only (indices into the tensor's parts), each into its place in
  // `dst` (the whole tensor's bytes); the rest of `dst` is left as it is.
  Event ReadParts(TensorHandle t, std::span<std::byte> dst, std::span<const int> parts);
  int num_parts(TensorHandle t) const;
  // Part i's bytes [first, second) within the tensor.
  std::pair<uint64_t, uint64_t> part(TensorHandle t, int i) const;

  // A buffer of `pool`: a free one, else (blocking) the one the oldest write-back holding
  // a buffer of `pool` releases. nullopt when none is free and no write-back holds one.
  std::optional<PinnedBuffer> AcquireBuffer(PinnedPool& pool);
  // True while a write-back of `t` has not completed.
  bool WriteInFlight(TensorHandle t);
  // Waits for every write-back in flight; the first failure, naming its tensor.
  Status FlushWrites();
  // The first write-back that failed so far (sticky: its bytes were lost with its buffer),
  // naming the tensor and the file; OK when none has.
  Status WriteBackFailure() const;

  // A kCpu tensor's memory, for in-place work (e.g. the CPU Adam on a resident shard); zeros
  // if the tensor was never written. From then on the memory is the tensor.
  std::span<std::byte> CpuMemory(TensorHandle t);

  // Host memory that NVMe transfers will read into and write from (the caller's pinned
  // pools): registered with io_uring (NvmeTier::RegisterBuffers). No-op without NVMe.
  Status RegisterIoBuffers(std::span<const std::span<std::byte>> regions);

  StatusOr<TensorHandle> Find(const std::string& name) const;
  const std::string& name(TensorHandle t) const;
  uint64_t bytes(TensorHandle t) const;
  Tier home(TensorHandle t) const;
  uint64_t used_bytes(Tier tier) const;
  uint64_t budget_bytes(Tier tier) const;
  // The swap file, when the kNvme home is one (for its statistics), else null.
  NvmeTier* nvme() { return swap_file_; }

 private:
  struct Entry;
  explicit TieredStore(TieredStoreOptions options);
  struct WriteBackRecord;
  Entry& Get(TensorHandle t);
  const Entry& Get(TensorHandle t) const;
  // Waits for `t`'s write-back in flight, if any (traced through on_wait).
  void WaitForWriteBack(TensorHandle t);
  // false: none in flight. `parts`: those only (empty: all).
  bool ReadFromWriteBack(TensorHandle t, std::span<std::byte> dst, std::span<const int> parts = {});
  // The NVMe transfers of a tensor, one per part (`parts`: those only; empty: all).
  Event NvmeWrite(const Entry& e, std::span<const std::byte> src);
  Event NvmeRead(const Entry& e, std::span<std::byte> dst, std::span<const int> parts);
  // Releases the leases of completed write-backs, oldest first; records failures.
  void RetireFinished();
  void Retire(WriteBackRecord& w);

  TieredStoreOptions options_;
  std::shared_ptr<ExtentTier> nvme_;  // the kNvme home's tier, or null
  NvmeTier* swap_file_ = nullptr;     // nvme_, when it is the swap file
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strata
