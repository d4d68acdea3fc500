// PrefetchScheduler: walks the step's static order of block visits (forward, head,
// backward) and keeps the store reads of upcoming blocks' working weights in flight,
// bounded by a byte budget and by the pinned buffers available. It needs no tracing: the
// order is a plan given up front (Note [Prefetch budget]).
//
// Note [Prefetch budget]: at most `budget_bytes` of reads are in flight or fetched but not
// yet taken, except that the next block is always allowed (a budget smaller than one block
// must not deadlock). high_water_bytes() records the maximum, which tests check.
//
// A read starts only once its item's `ready` event happened (Note [Optimizer overlap]): reads
// run ahead over items that are ready and stop at the first that is not; Take() waits for it.
//
// Buffers come from `pool`; when it is empty and nothing is in flight, the store gives back
// the buffer of its oldest write-back (TieredStore::AcquireBuffer). A read of a tensor whose
// write-back is still in flight waits for it (the store's rule).
//
// Threading: one thread (the compute thread) calls Take().
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "strata/event.h"
#include "strata/pinned_pool.h"
#include "strata/status.h"
#include "strata/tiered_store.h"
#include "strata/trace.h"

namespace strata {

class PrefetchScheduler {
 public:
  struct Item {
    int block = 0;        // what Take() is asked for
    TensorHandle tensor;  // what is read: the block's working weights in the store
    Event ready;    // the read may start once this happened (the block's optimizer update)
    // Only these parts of the tensor (TieredStore::ReadParts), into their places in the buffer;
    // empty: all of it.
    std::vector<int> parts;
  };

  // `store`, `pool` and `tracer` (may be null) are borrowed.
  PrefetchScheduler(std::vector<Item> plan, TieredStore* store, PinnedPool* pool, uint64_t budget_bytes,
                    Tracer* tracer);

  // Returns a buffer holding block b's working weights; b must be the next block of the
  // plan. Blocks until its read completes (time recorded as waiting) and issues further reads.
  StatusOr<PinnedBuffer> Take(int block);
  bool done() const { return next_take_ == plan_.size(); }
  uint64_t high_water_bytes() const { return high_water_; }
  uint64_t budget_bytes() const { return budget_; }
  // Waits for every read still in flight (e.g. before an error return).
  void Drain();

 private:
  struct InFlight {
    int block;
    PinnedBuffer buffer;
    Event event;
    uint64_t bytes;
  };
  void IssueMore();

  std::vector<Item> plan_;
  TieredStore* store_;
  PinnedPool* pool_;
  uint64_t budget_;
  Tracer* tracer_;
  size_t next_issue_ = 0, next_take_ = 0;
  std::deque<InFlight> in_flight_;
  uint64_t in_flight_bytes_ = 0, high_water_ = 0;
};

}  // namespace strata
