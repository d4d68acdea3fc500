// IoEngine: submits reads and writes of (registered file, offset, memory) and reaps their
// completions. It moves bytes and reports results; it does not split, retry or interpret
// them (the NVMe tier does, see nvme_tier.h). Like io_uring itself:
//  - every completion carries its own result: bytes transferred (possibly fewer than asked:
//    short I/O is normal and the caller resubmits the rest) or -errno;
//  - the caller bounds work in flight: at most queue_depth() submitted and not yet reaped.
// Threading: one thread drives an engine (Submit and Reap from the same thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "strata/status.h"

namespace strata {

enum class IoOp { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  int file = 0;          // index into the files given to RegisterFiles
  std::byte* buf = nullptr;
  uint32_t len = 0;      // bytes
  uint64_t offset = 0;   // bytes from the start of the file
  uint64_t tag = 0;      // returned in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // >= 0: bytes transferred; < 0: -errno
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual const char* name() const = 0;
  virtual unsigned queue_depth() const = 0;
  // Registers the files that requests address by index (replaces any earlier set).
  virtual Status RegisterFiles(std::span<const int> fds) = 0;
  // Registers memory regions for zero-copy fixed-buffer I/O. Requests whose memory lies
  // inside a region use it; others work too. Best effort: an engine may ignore it.
  virtual Status RegisterBuffers(std::span<const std::span<std::byte>> regions) = 0;
  // Queues requests; the caller guarantees in-flight + reqs.size() <= queue_depth().
  // A Status error means the engine itself failed (not one request).
  virtual Status Submit(std::span<const IoRequest> reqs) = 0;
  // Appends at least `min_complete` completions to `out` (blocking), or whatever is ready
  // when min_complete == 0.
  virtual Status Reap(unsigned min_complete, std::vector<IoCompletion>* out) = 0;
  // Called once by the thread that will Submit and Reap, before its first Submit (an
  // io_uring created for a single issuer is enabled here, by that thread).
  virtual Status AttachDrivingThread() { return Status(); }
};

// io_uring through liburing: registered file table and buffers, batched submission.
// Fails with kUnavailable where the kernel or a seccomp policy refuses io_uring.
StatusOr<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth);
// The fallback: plain pread/pwrite, executed synchronously at Submit.
std::unique_ptr<IoEngine> MakePreadEngine(unsigned queue_depth);

}  // namespace strata
