// Folder-private: one visit of a sparse layer's block whose experts are fetched as they are
// routed (Note [Expert-aware fetching]): the parts of no expert (router, attention, norms)
// brought in at once, each expert only once some token chooses it. The Gatherer starts one
// for each such visit and hands it the router's counts.
#pragma once

#include <span>
#include <vector>

#include "src/engine/engine_parts.h"
#include "src/engine/experts/expert_parts.h"
#include "src/engine/step_stats.h"

namespace strata {

// What a routed fetch uses of the engine: the plan, where it runs, the store it reads the
// experts' parts from, and the step's counts (the experts it fetched).
struct RoutedFetchParts {
  const ShardPlan& plan;
  const EngineIo& io;
  StateStore& state;
  StepStats& counts;
};

class RoutedVisit {
 public:
  // Starts block b's visit into `full` (its gather buffer, free after `*released`, which the
  // Gatherer updates as the buffer's readers change: it outlives the visit): the parts of
  // no expert copied in from `src` (host memory, or `lease`, the block's NVMe read, which holds
  // only this rank's other parts yet and stays with the visit for the experts' reads) and,
  // across ranks, broadcast. `working`: the block's working tensor in the store.
  RoutedVisit(const RoutedFetchParts& parts, int b, TensorHandle working, torch::Tensor full, const Event* released,
              PinnedBuffer lease, const std::byte* src);
  RoutedVisit(RoutedVisit&&) = default;
  // Waits for the copies still reading the lease (an error ended the pass).
  ~RoutedVisit();

  // When the parts of no expert are in place.
  const Event& ready() const { return ready_; }
  // The layer chose these experts (counts per expert): those no rank has fetched yet are read
  // (from NVMe, into the lease) and copied in, the compute waiting for them. Across ranks every
  // rank fetches what some rank's tokens chose (a collective: every rank calls it).
  Status FetchChosen(const RoutedFetchParts& parts, std::span<const int64_t> counts);
  // Gives the lease back to its pool once every copy from it is done; the visit is over.
  void GiveBackLease(const EngineIo& io);
  bool holds_lease() const { return lease_.valid(); }

 private:
  // Flat elements [lo, hi) of the block into the gather buffer, after `after`.
  EventList FetchRange(const RoutedFetchParts& parts, int64_t lo, int64_t hi, const EventList& after);

  int b_;
  TensorHandle working_;
  torch::Tensor full_;
  const Event* released_;  // the gather buffer's last reader done
  PinnedBuffer lease_;
  const std::byte* src_ = nullptr;
  std::vector<WorkingPart> parts_;
  std::vector<uint8_t> fetched_;  // per expert
  EventList copies_;
  Event ready_;
};

}  // namespace strata
