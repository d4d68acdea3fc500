// One setting of the NVMe tier's I/O benchmark: a (block size, queue depth) pair, measured in
// one direction at a time as the store's own path (O_DIRECT, io_uring, block-sized requests,
// queue_depth in flight, registered buffers) and as fio's io_uring engine on the same folder,
// file size, block size and queue depth. `bench io`, its --sweep, `bench tune` and
// `bench links` all measure through an IoPoint, so their figures mean the same thing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/io_results.h"
#include "strata/nvme_tier.h"
#include "strata/pinned_pool.h"
#include "strata/status.h"

namespace strata::bench {

// fio's two io_uring anchors: its defaults, and with --fixedbufs --registerfiles (registered
// buffers and file, as the store itself uses; fio's strongest io_uring setting).
enum class FioFlavour { kDefaults, kFixedBuffers };

struct IoPointSettings {
  std::string dir;              // parent of the tier's private swap folder (the drive to measure)
  uint64_t size = 0;            // bytes per pass; rounded down to whole tensors
  uint32_t block = 1u << 20;    // aio.block_size: bytes per request, a multiple of 4096 dividing tensor_bytes
  unsigned queue_depth = 32;    // aio.queue_depth
  uint64_t tensor_bytes = 64ull << 20;  // the store moves tensors of this size
  bool checksums = true;        // the store's default: xxh3 per tensor, verified on read
  IoEngineKind engine = IoEngineKind::kAuto;
};

// GB/s of single passes, one entry per round, for each side.
struct IoSamples {
  std::vector<double> store, fio, fio_fixed;
};

// Tensor-sized buffers the store's pass needs: enough tensors to keep queue_depth blocks in
// flight, plus two being refilled (at least 3).
size_t StoreBuffersFor(uint32_t block, unsigned queue_depth, uint64_t tensor_bytes);

// `count` page-locked buffers of tensor_bytes filled with pseudo-random bytes (what the store
// writes). Allocate once: first touch costs ~0.5 s/GB on this VM.
StatusOr<std::unique_ptr<PinnedPool>> MakeBenchPool(size_t count, uint64_t tensor_bytes, HostPages pages);

// True when fio is on the PATH.
bool HaveFio();

// "uring", "pread", anything else "auto" (the --engine flag's values).
IoEngineKind EngineKindFromName(const std::string& name);

// A tier opened for one setting, with its extents allocated, and fio's file beside them in the
// same private folder (so Ctrl-C, which removes this process's swap folders, removes it too).
// Not thread-safe; a read pass needs a write pass of the same side before it.
class IoPoint {
 public:
  // Opens the tier with the setting's block and depth, registers all of `pool`'s buffers with
  // it and reserves size / tensor_bytes extents. `pool` (buffers of at least tensor_bytes) must
  // outlive the point; the store's pass uses min(pool size, StoreBuffersFor(...)) buffers.
  static StatusOr<std::unique_ptr<IoPoint>> Open(const IoPointSettings& settings, PinnedPool* pool);
  ~IoPoint();

  // Writes the store's extents (at this setting) and fio's file (quickly, in 8 MiB requests),
  // unmeasured, so that the measured writes overwrite allocated blocks as every training step
  // after the first does. Without it a point's first writes go to fresh fallocated space, which
  // costs both sides and fio far more (its first 128 KiB qd 1 write ran at 0.04 GB/s here, the
  // next at 1.0).
  // `with_fio` false: the store's extents only (no fio run, where fio is absent or broken).
  Status Prepare(bool with_fio);
  // One sequential pass of the store over every extent; a buffer is reused only after the
  // event that last used it completed (the store's normal pattern). Returns GB/s.
  StatusOr<double> StorePass(IoDirection direction);
  // One fio run on the same bytes, block and depth. Returns GB/s (fio's bw_bytes).
  StatusOr<double> FioPass(IoDirection direction, FioFlavour flavour);
  // A reader and a writer at once, as a step whose optimizer states live on NVMe reads some
  // sub-groups' states while it writes others back: the store reads the first half of the
  // extents while writing the second half, request for request; fio (registered buffers and
  // file, its strongest io_uring setting, as the store's) runs a reader and a writer job on
  // the two halves of its file. GB/s of both together.
  StatusOr<double> StoreMixedPass();
  StatusOr<double> FioMixedPass();
  // One round of those two, the order reversed on odd rounds; appends to out->store and out->fio.
  Status MixedRound(int round, bool fio, IoSamples* out);
  // One interleaved round: the store and each of `fio` (none when empty), the order reversed
  // every other round (the VM's host caches recent writes, which must favour neither side).
  // Appends one sample per side to `out`.
  Status Round(IoDirection direction, int round, std::span<const FioFlavour> fio, IoSamples* out);

  NvmeTier& tier() { return *tier_; }
  uint64_t bytes() const { return extents_.size() * settings_.tensor_bytes; }  // per pass
  const IoPointSettings& settings() const { return settings_; }

 private:
  IoPoint(IoPointSettings settings, PinnedPool* pool, std::unique_ptr<NvmeTier> tier, std::vector<ExtentId> extents);
  // `requests` requests, request i issued by issue(i, buffer) through a ring of the pool's
  // buffers, each reused only after the event that last used it completed (the store's normal
  // pattern). Returns the seconds they took, or the first failure.
  StatusOr<double> RingPass(size_t requests, const std::function<Event(size_t, std::span<std::byte>)>& issue);
  // fio's run on this point's file and bytes with the given request size and depth; GB/s.
  StatusOr<double> RunFio(IoDirection direction, uint32_t block, unsigned queue_depth, bool fixed_buffers);
  // Runs `cmd` (fio with --output-format=json) and returns its parsed report.
  StatusOr<nlohmann::json> RunFioJson(const std::string& cmd);
  IoPointSettings settings_;
  PinnedPool* pool_;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<ExtentId> extents_;
  std::string fio_file_;
};

}  // namespace strata::bench
