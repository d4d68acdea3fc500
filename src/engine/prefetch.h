// PrefetchScheduler: walks the step's static order of group visits (forward, head,
// backward) and keeps the reads of upcoming groups' working weights in flight, bounded by
// a byte budget and by the pinned buffers available. It needs no tracing: the order is a
// plan given up front (Note [Prefetch budget]).
//
// Note [Prefetch budget]: at most `budget_bytes` of reads are in flight or fetched but not
// yet taken, except that the next group is always allowed (a budget smaller than one group
// must not deadlock). high_water_bytes() records the maximum, which tests check.
//
// Threading: one thread (the compute thread) calls Take().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "strata/pinned_pool.h"
#include "strata/status.h"
#include "strata/ticket.h"
#include "strata/trace.h"

namespace strata {

class PrefetchScheduler {
 public:
  // Issues the read of group g into dst (dst.size() == bytes_of(g)).
  using IssueFn = std::function<Ticket(int group, std::span<std::byte> dst)>;

  // `reclaim` is asked to free a pinned buffer (e.g. by waiting for a write-back that
  // holds one) when the pool is empty and nothing is in flight; false if it cannot.
  PrefetchScheduler(std::vector<int> plan, std::function<uint64_t(int)> bytes_of, uint64_t budget_bytes,
                    PinnedPool* pool, IssueFn issue, std::function<bool()> reclaim, Tracer* tracer);

  // Returns a buffer holding group g, which must be the next group of the plan. Blocks
  // until its read completes (time recorded as waiting) and issues further reads.
  StatusOr<PinnedBuffer> Take(int group);
  bool done() const { return next_take_ == plan_.size(); }
  uint64_t high_water_bytes() const { return high_water_; }
  uint64_t budget_bytes() const { return budget_; }
  // Waits for every read still in flight (e.g. before an error return).
  void Drain();

 private:
  struct InFlight {
    int group;
    PinnedBuffer buffer;
    Ticket ticket;
    uint64_t bytes;
  };
  void IssueMore();

  std::vector<int> plan_;
  std::function<uint64_t(int)> bytes_of_;
  uint64_t budget_;
  PinnedPool* pool_;
  IssueFn issue_;
  std::function<bool()> reclaim_;
  Tracer* tracer_;
  size_t next_issue_ = 0, next_take_ = 0;
  std::deque<InFlight> in_flight_;
  uint64_t in_flight_bytes_ = 0, high_water_ = 0;
};

}  // namespace strata
