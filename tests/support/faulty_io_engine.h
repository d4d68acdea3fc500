// FaultyIoEngine: wraps a real IoEngine and corrupts the results of chosen requests, to test
// that the NVMe tier checks every completion. Faults apply to the N-th request (counted from
// 0 over all submissions) of the given operation, or to every request when nth < 0.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/io_engine.h"

namespace strata::testing {

enum class FaultKind {
  kError,      // the request fails with -err
  kShort,      // only half of the request is transferred (the rest must be resubmitted)
  kEagain,     // -EAGAIN once, before the request runs (must be resubmitted)
  kSlow,       // the request runs, submitted `delay_us` late (a slow disk)
};

struct Fault {
  IoOp op = IoOp::kWrite;
  long nth = 0;  // which request of that op; < 0: every one
  FaultKind kind = FaultKind::kError;
  int err = EIO;
  int delay_us = 0;  // kSlow
};

class FaultyIoEngine final : public IoEngine {
 public:
  FaultyIoEngine(std::unique_ptr<IoEngine> inner, std::vector<Fault> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}
  const char* name() const override { return inner_->name(); }
  unsigned queue_depth() const override { return inner_->queue_depth(); }
  Status RegisterFiles(std::span<const int> fds) override { return inner_->RegisterFiles(fds); }
  Status RegisterBuffers(std::span<const std::span<std::byte>> r) override { return inner_->RegisterBuffers(r); }
  Status Submit(std::span<const IoRequest> reqs) override;
  Status Reap(unsigned min_complete, std::vector<IoCompletion>* out) override;
  Status AttachDrivingThread() override { return inner_->AttachDrivingThread(); }
  long injected() const { return injected_; }
  long requests(IoOp op) const { return count_[static_cast<int>(op)]; }  // submitted so far

 private:
  const Fault* Match(IoOp op, long index) const;
  std::unique_ptr<IoEngine> inner_;
  std::vector<Fault> faults_;
  std::atomic<long> count_[2] = {0, 0};
  long injected_ = 0;
  std::vector<IoCompletion> synthetic_;  // completions made up without touching the disk
};

}  // namespace strata::testing
