// Folder-private: the Gatherer brings each visit's working weights to the compute device, the
// next visit's while this one computes (gatherer.cc). Built from the parts it uses.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "src/engine/engine_parts.h"
#include "src/engine/experts/block_routing.h"
#include "src/engine/experts/routed_fetch.h"
#include "src/engine/prefetch.h"
#include "src/engine/step_stats.h"
#include "src/engine/working_format.h"

namespace strata {

// What the Gatherer uses of the engine: the plan, where it runs, the blocks it binds, the store
// it reads from, the device's gather buffers, whether a block's update is done, and the step's
// counts (the experts it fetched).
struct GatherParts {
  const ShardPlan& plan;
  const EngineIo& io;
  ModelBlocks& model;
  StateStore& state;
  DeviceBuffers& bufs;
  WorkingFormat& working;  // binds a gathered block's parameters (decoding NF4 weights)
  BlockReadiness& readiness;
  StepStats& counts;
};

// Gathers the blocks of a plan of visits, one ahead of the compute on a device (the next
// block is copied in and all-gathered while one computes), and binds each block's
// parameters to its gather buffer. Acquire() blocks compute until the block is there;
// Release() marks the compute that read the blocks acquired since the last Release.
class Gatherer final : public ExpertFetcher {
 public:
  // `on_visit`: told of each Acquire (a training step's gatherer: Engine::OnStepVisit).
  Gatherer(GatherParts parts, std::vector<Visit> plan, PrefetchScheduler* prefetch,
           std::function<void(size_t done, size_t total)> on_visit = {});
  ~Gatherer() override;
  Status Acquire(int block);
  // A sparse layer of the block acquired last chose these experts (counts per expert): those it
  // has not fetched yet are read and copied in, the compute waiting for them (Note
  // [Expert-aware fetching]). Nothing for a block fetched whole.
  Status FetchExperts(int block, std::span<const int64_t> counts) override;
  // `slot`, acquired earlier and released since, is read again by the next compute.
  void Reuse(GatherSlot* slot) { in_use_.push_back(slot); }
  void Release();

 private:
  struct Gathered {
    Gathered(torch::Tensor f, Event r, GatherSlot* s) : full(std::move(f)), ready(std::move(r)), slot(s) {}
    torch::Tensor full;
    Event ready;
    GatherSlot* slot = nullptr;  // null: a resident block bound in place
    std::optional<RoutedVisit> routed;  // a sparse layer's block fetched as its experts are routed
  };
  Status Issue(const Visit& v);
  // Where block b's working weights are read from: host memory, or its prefetched NVMe read,
  // taken into *lease (with a LoRA block's adapters copied in after the frozen base).
  StatusOr<const std::byte*> Source(int b, PinnedBuffer* lease);
  RoutedFetchParts routed_parts() const { return {m_.plan, m_.io, m_.state, m_.counts}; }
  void Bind(int block, const torch::Tensor& full);

  GatherParts m_;
  std::vector<Visit> plan_;
  PrefetchScheduler* prefetch_;
  size_t lookahead_;
  std::vector<Gathered> gathered_;  // one per issued visit
  size_t acquired_ = 0;
  std::function<void(size_t done, size_t total)> on_visit_;
  std::vector<GatherSlot*> in_use_;  // acquired, not yet released
  std::vector<size_t> holding_;      // acquired, not yet released, holding a lease (routed fetches)
};

}  // namespace strata
