// The Gatherer (engine_impl.h): each visit's working weights brought to the compute device,
// the next visit's while this one computes, and bound to the block's parameters.
#include <algorithm>
#include <cstring>

#include "src/engine/engine_impl.h"
#include "strata/check.h"

namespace strata {

Gatherer::Gatherer(Engine::Impl& m, std::vector<Visit> plan, PrefetchScheduler* prefetch, bool report_visits)
    : m_(m),
      plan_(std::move(plan)),
      prefetch_(prefetch),
      lookahead_(m.bufs.gather.size() > 1 ? 1 : 0),
      report_visits_(report_visits) {}

Gatherer::~Gatherer() {
  // Gathers issued but never used (an error ended the pass): their copies read leases.
  for (size_t v = acquired_; v < gathered_.size(); ++v) gathered_[v].ready.Wait().IgnoreError();
}

// Starts visit v: the block's shard copied in (from the cpu tier or a prefetched NVMe
// read) and all-gathered into a free gather buffer, or nothing for a resident block at
// stage < 3 (its full weights are on the device already).
Status Gatherer::Issue(const Visit& v) {
  const int b = v.block;
  const ShardPlan& plan = m_.plan;
  STRATA_RETURN_IF_ERROR(m_.AwaitBlock(b));  // its update done (and shared)
  const ShardLayout& layout = plan.blocks[b].layout;
  if (plan.resident[b] && !plan.weights_sharded) {
    gathered_.push_back({m_.bufs.resident[b], m_.bufs.resident_ready[b], nullptr});
    return Status();
  }
  GatherSlot& slot = v.tied ? m_.bufs.tied : m_.bufs.gather[m_.bufs.next_gather++ % m_.bufs.gather.size()];
  torch::Tensor full = slot.full.narrow(0, 0, layout.padded);
  Event ready;
  if (plan.resident[b]) {  // stage 3: the shard is on the device
    ready = m_.io.dev->AllGather(m_.bufs.resident[b].data_ptr(), full.data_ptr(), layout.shard, plan.compute,
                              {slot.released, m_.bufs.resident_ready[b]});
  } else {
    PinnedBuffer lease;
    const std::byte* src = m_.HostWorking(b);
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
    if (lease.valid()) m_.ReleaseAfter(std::move(lease), src_read);
  }
  gathered_.push_back({full, ready, &slot});
  return Status();
}

Status Gatherer::Acquire(int block) {
  STRATA_CHECK(acquired_ < plan_.size() && plan_[acquired_].block == block)
      << "gather plan expected block " << (acquired_ < plan_.size() ? plan_[acquired_].block : -1) << ", got "
      << block;
  if (report_visits_ && m_.on_step_visit) m_.on_step_visit(acquired_, plan_.size());
  // This visit, and the ones ahead whose blocks the optimizer has finished (never waiting for
  // the optimizer on a block that is not needed yet).
  while (gathered_.size() < std::min(plan_.size(), acquired_ + 1 + lookahead_) &&
         (gathered_.size() == acquired_ || m_.BlockReady(plan_[gathered_.size()].block)))
    STRATA_RETURN_IF_ERROR(Issue(plan_[gathered_.size()]));
  const Gathered& g = gathered_[acquired_++];
  STRATA_RETURN_IF_ERROR(m_.ComputeAfter(g.ready, "wait gather"));
  if (g.slot) in_use_.push_back(g.slot);
  return TorchCall("bind weights", [&] { Bind(block, g.full); });
}

void Gatherer::Release() {
  if (in_use_.empty()) return;
  const Event done = m_.io.dev->RecordCompute();
  for (GatherSlot* s : in_use_) s->released = done;
  in_use_.clear();
}

// QLoRA: a block's NF4 weights are dequantised from the gathered blobs into the next decode
// buffer, on the compute stream (Note [NF4 base]); the buffers turn over as the gather
// buffers do, so each lives until the compute that read it is done.
void Gatherer::Bind(int block, const torch::Tensor& full) {
  BlockRuntime& br = m_.model.blocks[block];
  torch::Tensor decoded;
  if (br.nf4) decoded = m_.bufs.decoded[m_.bufs.next_decode++ % m_.bufs.decoded.size()];
  Tracer::Span span(m_.io.tracer, Track::kCompute, br.nf4 ? "dequantise g" + std::to_string(block) : std::string());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < br.params.size(); ++i) {
    const ParamSlot& s = br.slots[i];
    if (!s.nf4) {
      br.params[i].set_data(full.narrow(0, s.offset, s.numel).view(s.shape));
      continue;
    }
    torch::Tensor out = decoded.narrow(0, s.decoded_at, s.numel);
    model::DequantizeNf4Blob(full.narrow(0, s.offset, s.stored).view(torch::kUInt8), s.numel, out, m_.bufs.nf4_tables);
    br.params[i].set_data(out.view(s.shape));
  }
}

}  // namespace strata
