// The Gatherer (gatherer.h): each visit's working weights brought to the compute device,
// the next visit's while this one computes, and bound to the block's parameters.
#include <algorithm>
#include <cstring>

#include "src/engine/gatherer.h"

#include "src/device/torch_call.h"
#include "strata/check.h"

namespace strata {

Gatherer::Gatherer(GatherParts parts, std::vector<Visit> plan, PrefetchScheduler* prefetch,
                   std::function<void(size_t done, size_t total)> on_visit)
    : m_(parts),
      plan_(std::move(plan)),
      prefetch_(prefetch),
      lookahead_(parts.bufs.gather.size() > 1 ? 1 : 0),
      on_visit_(std::move(on_visit)) {}

Gatherer::~Gatherer() {
  // Gathers issued but never used (an error ended the pass): their copies read leases.
  for (size_t v = acquired_; v < gathered_.size(); ++v) gathered_[v].ready.Wait().IgnoreError();
  for (Gathered& g : gathered_)
    for (const Event& e : g.copies) e.Wait().IgnoreError();
}

// Starts visit v: the block's shard copied in (from the cpu tier or a prefetched NVMe
// read) and all-gathered into a free gather buffer, or nothing for a resident block at
// stage < 3 (its full weights are on the device already).
Status Gatherer::Issue(const Visit& v) {
  const int b = v.block;
  const ShardPlan& plan = m_.plan;
  STRATA_RETURN_IF_ERROR(m_.readiness.AwaitBlock(b));  // its update done (and shared)
  const ShardLayout& layout = plan.blocks[b].layout;
  if (plan.resident[b] && !plan.weights_sharded) {
    gathered_.push_back({m_.bufs.resident[b], m_.bufs.resident_ready[b], nullptr});
    return Status();
  }
  GatherSlot& slot = v.tied ? m_.bufs.tied : m_.bufs.gather[m_.bufs.next_gather++ % m_.bufs.gather.size()];
  torch::Tensor full = slot.full.narrow(0, 0, layout.padded);
  if (plan.FetchesRouted(b)) return IssueRouted(b, slot, full);
  Event ready;
  if (plan.resident[b]) {  // stage 3: the shard is on the device
    ready = m_.io.dev->AllGather(m_.bufs.resident[b].data_ptr(), full.data_ptr(), layout.shard, plan.compute,
                              {slot.released, m_.bufs.resident_ready[b]});
  } else {
    PinnedBuffer lease;
    const std::byte* src = m_.state.InHostMemory(m_.model.blocks[b].working);
    if (!src) {
      STRATA_ASSIGN_OR_RETURN(lease, prefetch_->Take(b));
      src = lease.data();
      // LoRA, base on NVMe: the read brought the frozen part; the trainable end follows it.
      if (m_.model.blocks[b].adapter.valid()) {
        const std::span<std::byte> adapter = m_.state.store->CpuMemory(m_.model.blocks[b].adapter);
        std::memcpy(lease.data() + plan.blocks[b].working_tensor_len() * plan.dsize, adapter.data(), adapter.size());
      }
    }
    Event src_read;  // after it, the host source may be reused
    if (!plan.weights_sharded) {  // every rank holds the full group in host memory
      ready = src_read = m_.io.dev->CopyIn(full, src, {slot.released});
    } else if (m_.io.dev->is_host()) {
      Tracer::Span span(m_.io.tracer, Track::kComm, "all-gather g" + std::to_string(b));
      ready = src_read = m_.io.dev->AllGather(src, full.data_ptr(), layout.shard, plan.compute, {slot.released});
    } else {
      torch::Tensor shard = slot.shard_in.narrow(0, 0, layout.shard);
      src_read = m_.io.dev->CopyIn(shard, src, {slot.shard_read});
      ready = slot.shard_read =
          m_.io.dev->AllGather(shard.data_ptr(), full.data_ptr(), layout.shard, plan.compute, {src_read, slot.released});
    }
    if (lease.valid()) m_.io.ReleaseAfter(std::move(lease), src_read);
  }
  gathered_.push_back({full, ready, &slot});
  return Status();
}

// Note [Expert-aware fetching]: a sparse layer's block is brought in without its experts (its
// NVMe read brought only this rank's other parts); the lease stays with the visit, for the
// experts' reads, until the visit is released.
Status Gatherer::IssueRouted(int b, GatherSlot& slot, const torch::Tensor& full) {
  Gathered g{full, Event(), &slot};
  g.src = m_.state.InHostMemory(m_.model.blocks[b].working);
  const BlockPlan& bp = m_.plan.blocks[b];
  if (!g.src) {
    STRATA_ASSIGN_OR_RETURN(g.lease, prefetch_->Take(b));
    g.src = g.lease.data();
    if (m_.model.blocks[b].adapter.valid()) {  // LoRA's adapters, after the base (as in Issue)
      const std::span<std::byte> adapter = m_.state.store->CpuMemory(m_.model.blocks[b].adapter);
      std::memcpy(g.lease.data() + bp.working_tensor_len() * m_.plan.dsize, adapter.data(), adapter.size());
    }
  }
  g.parts = PartsOfWorking(m_.plan, b);
  g.fetched.assign(bp.experts.count, 0);
  EventList events = FetchRange(g, bp, 0, bp.experts.begin, {slot.released});
  for (const Event& e : FetchRange(g, bp, bp.experts.end(), bp.layout.padded, {slot.released})) events.push_back(e);
  g.ready = AllOf(events);
  g.copies.push_back(g.ready);
  gathered_.push_back(std::move(g));
  return Status();
}

// Flat elements [lo, hi) of the block into the visit's gather buffer: the pieces this rank
// holds copied in from its source; with ZeRO-3 across ranks each rank's piece then broadcast
// from it, in rank order (every rank issues the same broadcasts).
EventList Gatherer::FetchRange(Gathered& g, const BlockPlan& bp, int64_t lo, int64_t hi, const EventList& after) {
  EventList events;
  const ShardLayout& l = bp.layout;
  const size_t dsize = m_.plan.dsize;
  auto* full = static_cast<std::byte*>(g.full.data_ptr());
  if (!m_.plan.GathersAcrossRanks()) {  // this rank holds the whole group
    if (lo < hi) events.push_back(m_.io.dev->CopyIn(g.full.narrow(0, lo, hi - lo), g.src + lo * dsize, after));
    return events;
  }
  for (int q = 0; q < l.world; ++q) {
    const int64_t from = std::max(lo, q * l.shard), to = std::min(hi, (q + 1) * l.shard);
    if (from >= to) continue;
    EventList ready = after;
    if (q == l.rank)
      ready.push_back(m_.io.dev->CopyIn(g.full.narrow(0, from, to - from), g.src + (from - l.begin()) * dsize, after));
    events.push_back(m_.io.dev->Broadcast(full + from * dsize, to - from, m_.plan.compute, q, ready));
  }
  return events;
}

Status Gatherer::FetchExperts(int block, std::span<const int64_t> counts) {
  STRATA_CHECK(acquired_ > 0 && plan_[acquired_ - 1].block == block)
      << "experts of block " << block << " routed while block " << (acquired_ > 0 ? plan_[acquired_ - 1].block : -1)
      << " is acquired";
  Gathered& g = gathered_[acquired_ - 1];
  if (g.fetched.empty()) return Status();  // fetched whole
  const BlockPlan& bp = m_.plan.blocks[block];
  std::vector<float> chosen(g.fetched.size(), 0.0f);
  for (size_t e = 0; e < chosen.size() && e < counts.size(); ++e) chosen[e] = counts[e] > 0 ? 1.0f : 0.0f;
  if (m_.plan.GathersAcrossRanks())  // every rank gathers what some rank's tokens chose
    STRATA_RETURN_IF_ERROR(m_.io.comm->AllReduce(chosen.data(), chosen.size(), DType::kF32, ReduceOp::kSum));
  std::vector<int> want;  // experts
  for (size_t e = 0; e < chosen.size(); ++e) {
    if (chosen[e] == 0 || g.fetched[e]) continue;
    g.fetched[e] = 1;
    want.push_back(static_cast<int>(e));
  }
  if (want.empty()) return Status();
  m_.counts.experts_fetched += static_cast<int64_t>(want.size());
  if (g.lease.valid()) {  // this rank's parts of them from NVMe, into their places in the lease
    std::vector<int> parts;
    for (size_t i = 0; i < g.parts.size(); ++i)
      if (g.parts[i].expert >= 0 && std::find(want.begin(), want.end(), g.parts[i].expert) != want.end())
        parts.push_back(static_cast<int>(i));
    Tracer::Span wait(m_.io.tracer, Track::kWait, "wait experts g" + std::to_string(block));
    const TensorHandle h = m_.model.blocks[block].working;
    STRATA_RETURN_IF_ERROR(m_.state.store->ReadParts(h, g.lease.span().subspan(0, m_.state.store->bytes(h)), parts).Wait());
  }
  EventList events;
  const model::ExpertSpan& x = bp.experts;
  for (int e : want)
    for (const Event& ev : FetchRange(g, bp, x.begin + e * x.numel, x.begin + (e + 1) * x.numel, {g.slot->released}))
      events.push_back(ev);
  Event ready = AllOf(events);
  g.copies.push_back(ready);
  return m_.io.ComputeAfter(ready, "wait experts");
}

Status Gatherer::Acquire(int block) {
  STRATA_CHECK(acquired_ < plan_.size() && plan_[acquired_].block == block)
      << "gather plan expected block " << (acquired_ < plan_.size() ? plan_[acquired_].block : -1) << ", got "
      << block;
  if (on_visit_) on_visit_(acquired_, plan_.size());
  // This visit, and the ones ahead whose blocks the optimizer has finished (never waiting for
  // the optimizer on a block that is not needed yet). Not ahead of a sparse layer's block
  // gathered across ranks: its experts' broadcasts come while it runs, and every rank must
  // issue its collectives in one order, whichever blocks its optimizer has finished.
  const bool holds = m_.plan.FetchesRouted(block) && m_.plan.GathersAcrossRanks();
  while (gathered_.size() < std::min(plan_.size(), acquired_ + 1 + (holds ? 0 : lookahead_)) &&
         (gathered_.size() == acquired_ || m_.readiness.BlockReady(plan_[gathered_.size()].block)))
    STRATA_RETURN_IF_ERROR(Issue(plan_[gathered_.size()]));
  const Gathered& g = gathered_[acquired_++];
  STRATA_RETURN_IF_ERROR(m_.io.ComputeAfter(g.ready, "wait gather"));
  if (g.slot) in_use_.push_back(g.slot);
  if (g.lease.valid()) holding_.push_back(acquired_ - 1);
  return TorchCall("bind weights", [&] { Bind(block, g.full); });
}

void Gatherer::Release() {
  for (size_t v : holding_) {  // the lease goes back once the copies from it are done
    Gathered& g = gathered_[v];
    m_.io.ReleaseAfter(std::move(g.lease), AllOf(g.copies));
  }
  holding_.clear();
  if (in_use_.empty()) return;
  const Event done = m_.io.dev->RecordCompute();
  for (GatherSlot* s : in_use_) s->released = done;
  in_use_.clear();
}

void Gatherer::Bind(int block, const torch::Tensor& full) {
  m_.working.Bind(block, m_.model.blocks[block], full, m_.io.tracer);
}

}  // namespace strata
