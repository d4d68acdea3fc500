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
  // (A routed visit waits for its own copies.)
  for (size_t v = acquired_; v < gathered_.size(); ++v) gathered_[v].ready.Wait().IgnoreError();
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
  if (plan.FetchesRouted(b)) {  // Note [Expert-aware fetching]
    PinnedBuffer lease;
    STRATA_ASSIGN_OR_RETURN(const std::byte* src, Source(b, &lease));
    Gathered& g = gathered_.emplace_back(full, Event(), &slot);
    g.routed.emplace(routed_parts(), b, m_.model.blocks[b].working, full, &slot.released, std::move(lease), src);
    g.ready = g.routed->ready();
    return Status();
  }
  Event ready;
  if (plan.resident[b]) {  // stage 3: the shard is on the device
    ready = m_.io.dev->AllGather(m_.bufs.resident[b].data_ptr(), full.data_ptr(), layout.shard, plan.compute,
                              {slot.released, m_.bufs.resident_ready[b]});
  } else {
    PinnedBuffer lease;
    STRATA_ASSIGN_OR_RETURN(const std::byte* src, Source(b, &lease));
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

StatusOr<const std::byte*> Gatherer::Source(int b, PinnedBuffer* lease) {
  if (const std::byte* src = m_.state.InHostMemory(m_.model.blocks[b].working)) return src;
  STRATA_ASSIGN_OR_RETURN(*lease, prefetch_->Take(b));
  // LoRA, base on NVMe: the read brought the frozen part; the trainable end follows it.
  if (m_.model.blocks[b].adapter.valid()) {
    const std::span<std::byte> adapter = m_.state.store->CpuMemory(m_.model.blocks[b].adapter);
    std::memcpy(lease->data() + m_.plan.blocks[b].working_tensor_len() * m_.plan.dsize, adapter.data(),
                adapter.size());
  }
  return static_cast<const std::byte*>(lease->data());
}

Status Gatherer::FetchExperts(int block, std::span<const int64_t> counts) {
  STRATA_CHECK(acquired_ > 0 && plan_[acquired_ - 1].block == block)
      << "experts of block " << block << " routed while block " << (acquired_ > 0 ? plan_[acquired_ - 1].block : -1)
      << " is acquired";
  Gathered& g = gathered_[acquired_ - 1];
  if (!g.routed) return Status();  // fetched whole
  return g.routed->FetchChosen(routed_parts(), counts);
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
  if (g.routed && g.routed->holds_lease()) holding_.push_back(acquired_ - 1);
  return TorchCall("bind weights", [&] { Bind(block, g.full); });
}

void Gatherer::Release() {
  for (size_t v : holding_) gathered_[v].routed->GiveBackLease(m_.io);  // once its copies are done
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
