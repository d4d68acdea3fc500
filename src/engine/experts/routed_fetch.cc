// RoutedVisit (routed_fetch.h): Note [Expert-aware fetching].
#include "src/engine/experts/routed_fetch.h"

#include <algorithm>

namespace strata {

RoutedVisit::RoutedVisit(const RoutedFetchParts& parts, int b, TensorHandle working, torch::Tensor full,
                         const Event* released, PinnedBuffer lease, const std::byte* src)
    : b_(b),
      working_(working),
      full_(std::move(full)),
      released_(released),
      lease_(std::move(lease)),
      src_(src),
      parts_(PartsOfWorking(parts.plan, b)) {
  const BlockPlan& bp = parts.plan.blocks[b];
  fetched_.assign(bp.experts.count, 0);
  EventList events = FetchRange(parts, 0, bp.experts.begin, {*released_});
  for (const Event& e : FetchRange(parts, bp.experts.end(), bp.layout.padded, {*released_})) events.push_back(e);
  ready_ = AllOf(events);
  copies_.push_back(ready_);
}

RoutedVisit::~RoutedVisit() {
  for (const Event& e : copies_) e.Wait().IgnoreError();
}

// The pieces this rank holds copied in from its source; with ZeRO-3 across ranks each rank's
// piece then broadcast from it, in rank order (every rank issues the same broadcasts).
EventList RoutedVisit::FetchRange(const RoutedFetchParts& parts, int64_t lo, int64_t hi, const EventList& after) {
  EventList events;
  const ShardLayout& l = parts.plan.blocks[b_].layout;
  const size_t dsize = parts.plan.dsize;
  ComputeDevice& dev = *parts.io.dev;
  auto* full = static_cast<std::byte*>(full_.data_ptr());
  if (!parts.plan.GathersAcrossRanks()) {  // this rank holds the whole group
    if (lo < hi) events.push_back(dev.CopyIn(full_.narrow(0, lo, hi - lo), src_ + lo * dsize, after));
    return events;
  }
  for (int q = 0; q < l.world; ++q) {
    const int64_t from = std::max(lo, q * l.shard), to = std::min(hi, (q + 1) * l.shard);
    if (from >= to) continue;
    EventList ready = after;
    if (q == l.rank)
      ready.push_back(dev.CopyIn(full_.narrow(0, from, to - from), src_ + (from - l.begin()) * dsize, after));
    events.push_back(dev.Broadcast(full + from * dsize, to - from, parts.plan.compute, q, ready));
  }
  return events;
}

Status RoutedVisit::FetchChosen(const RoutedFetchParts& parts, std::span<const int64_t> counts) {
  std::vector<float> chosen(fetched_.size(), 0.0f);
  for (size_t e = 0; e < chosen.size() && e < counts.size(); ++e) chosen[e] = counts[e] > 0 ? 1.0f : 0.0f;
  if (parts.plan.GathersAcrossRanks())  // every rank gathers what some rank's tokens chose
    STRATA_RETURN_IF_ERROR(parts.io.comm->AllReduce(chosen.data(), chosen.size(), DType::kF32, ReduceOp::kSum));
  std::vector<int> want;  // experts
  for (size_t e = 0; e < chosen.size(); ++e) {
    if (chosen[e] == 0 || fetched_[e]) continue;
    fetched_[e] = 1;
    want.push_back(static_cast<int>(e));
  }
  if (want.empty()) return Status();
  parts.counts.experts_fetched += static_cast<int64_t>(want.size());
  if (lease_.valid()) {  // this rank's parts of them from NVMe, into their places in the lease
    std::vector<int> read;
    for (size_t i = 0; i < parts_.size(); ++i)
      if (parts_[i].expert >= 0 && std::find(want.begin(), want.end(), parts_[i].expert) != want.end())
        read.push_back(static_cast<int>(i));
    Tracer::Span wait(parts.io.tracer, Track::kWait, "wait experts g" + std::to_string(b_));
    TieredStore& store = *parts.state.store;
    STRATA_RETURN_IF_ERROR(store.ReadParts(working_, lease_.span().subspan(0, store.bytes(working_)), read).Wait());
  }
  EventList events;
  const model::ExpertSpan& x = parts.plan.blocks[b_].experts;
  for (int e : want)
    for (const Event& ev : FetchRange(parts, x.begin + e * x.numel, x.begin + (e + 1) * x.numel, {*released_}))
      events.push_back(ev);
  Event ready = AllOf(events);
  copies_.push_back(ready);
  return parts.io.ComputeAfter(ready, "wait experts");
}

void RoutedVisit::GiveBackLease(const EngineIo& io) { io.ReleaseAfter(std::move(lease_), AllOf(copies_)); }

}  // namespace strata
