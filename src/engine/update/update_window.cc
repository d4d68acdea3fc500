// The optimizer's read / update / write window (update_window.h).
#include "src/engine/update/update_window.h"

#include <cstring>

#include "src/device/torch_call.h"
#include "strata/check.h"

namespace strata {

void DropStates(EarlyStates& states) {
  for (const auto& l : states)
    for (Event& t : l->read) t.Wait().IgnoreError();  // the buffers are being written into
  states.clear();
}

struct UpdateWindow::OutputAhead {
  int block = -1;  // whose working weights `read` brings into `lease`; -1: none
  PinnedBuffer lease;
  Event read;
  ~OutputAhead() {
    if (block >= 0) read.Wait().IgnoreError();  // the buffer is being written into
  }
};

// Updates the optimizer ranges of `blocks`, sub-group by sub-group, as one pipeline across
// block boundaries: with the states on NVMe, the reads of the next sub-group (of this block
// or the next) and the write-backs of the previous ones are in flight while one is updated.
// The store owns the write-backs: each holds its buffer until written, and a full pool
// waits for the oldest one (TieredStore::AcquireBuffer).
Status UpdateWindow::UpdateBlocks(const AdamHyperParams& hp, const std::vector<int>& blocks, EarlyStates& early,
                                  const std::vector<std::shared_ptr<HostEventState>>& ready, ParkingLot* park) {
  const bool states_nvme = m_.state.pools.optim != nullptr;
  auto load = [&](const SubGroup& sg) -> std::unique_ptr<LoadedStates> {  // the early read, when it is of sg
    if (m_.state.store->home(sg.moment()) != Tier::kNvme) return nullptr;  // strata.host_blocks: updated in place
    if (!early.empty() && early.front()->sub != &sg) DropStates(early);  // (not expected: read in another order)
    if (early.empty()) return LoadStates(sg);
    std::unique_ptr<LoadedStates> l = std::move(early.front());
    early.pop_front();
    return l;
  };
  std::vector<std::pair<int, const SubGroup*>> order;  // every (block, sub-group) in update order
  for (int b : blocks)
    for (const SubGroup& sg : m_.model.blocks[b].subs) order.push_back({b, &sg});

  std::unique_ptr<LoadedStates> next;
  if (states_nvme && !order.empty()) next = load(*order[0].second);
  OutputAhead ahead;  // (declared after `next`: its read is waited for first on the way out)
  // Blocks without sub-groups here (frozen, or an empty optimizer range) have nothing to wait for.
  for (int b : blocks)
    if (m_.model.blocks[b].subs.empty()) ready[b]->Set(Status());
  PinnedBuffer out_lease;  // the current block's updated working weights, bound for NVMe or the device
  std::byte* working_out = nullptr;
  int64_t out_first = 0;  // the flat element at working_out
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [b, sg] = order[i];
    if (i == 0 || order[i - 1].first != b) {
      STRATA_ASSIGN_OR_RETURN(working_out, BlockOutput(b, &out_lease, &out_first, &ahead, park));
      size_t j = i;
      while (j < order.size() && order[j].first == b) ++j;
      if (j < order.size() && !park) ReadOutputAhead(order[j].first, &ahead);
    }
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (states_nvme && i + 1 < order.size()) next = load(*order[i + 1].second);
    std::byte* out = working_out + (sg->range.begin - out_first) * m_.plan.dsize;
    STRATA_RETURN_IF_ERROR(UpdateSubGroup(hp, b, *sg, cur.get(), out));
    if (i + 1 == order.size() || order[i + 1].first != b) {
      STRATA_RETURN_IF_ERROR(FinishBlock(b, std::move(out_lease), park));
      ready[b]->Set(Status());
    }
  }
  return Status();
}

void UpdateWindow::ReadOutputAhead(int b, OutputAhead* ahead) {
  const BlockRuntime& br = m_.model.blocks[b];
  if (!m_.plan.format.MasterFromWorking() || ahead->block >= 0 || m_.plan.resident[b] || br.adapter.valid() ||
      !br.working.valid() || m_.state.store->home(br.working) != Tier::kNvme)
    return;
  std::optional<PinnedBuffer> got = m_.state.pools.param->TryAcquire();  // never waits: the compute may need them
  if (!got) return;
  ahead->lease = std::move(*got);
  ahead->read = ReadWorkingInto(b, ahead->lease);
  ahead->block = b;
}

Event UpdateWindow::ReadWorkingInto(int b, const PinnedBuffer& buf) {
  const TensorHandle h = m_.model.blocks[b].working;
  return m_.state.store->Read(h, buf.span().subspan(0, m_.state.store->bytes(h)));
}

StatusOr<std::byte*> UpdateWindow::BlockOutput(int b, PinnedBuffer* lease, int64_t* first, ParkingLot* park) {
  return BlockOutput(b, lease, first, nullptr, park);
}

// Where block b's updated working weights go: in place in the cpu tier (the adapter tensor
// of a LoRA block whose base is on NVMe), or a pinned buffer (`lease`) written to NVMe or
// copied to the device once the block is done, or parked.
StatusOr<std::byte*> UpdateWindow::BlockOutput(int b, PinnedBuffer* lease, int64_t* first, OutputAhead* ahead,
                                               ParkingLot* park) {
  const BlockRuntime& br = m_.model.blocks[b];
  const ShardPlan& plan = m_.plan;
  *first = plan.blocks[b].working.begin;
  if (br.adapter.valid()) {
    *first = plan.blocks[b].adapter.begin;
    return m_.state.store->CpuMemory(br.adapter).data();
  }
  if (!plan.resident[b] && m_.state.store->home(br.working) != Tier::kNvme) return m_.state.store->CpuMemory(br.working).data();
  if (park) {
    STRATA_ASSIGN_OR_RETURN(*lease, park->Take());
    return lease->data();
  }
  if (ahead && ahead->block == b) {  // read into it since the block before started
    std::optional<Tracer::Span> wait;
    if (!ahead->read.Ready())
      wait.emplace(m_.io.tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": waiting for its working weights");
    Status read = ahead->read.Wait();
    ahead->block = -1;
    *lease = std::move(ahead->lease);
    STRATA_RETURN_IF_ERROR(read.WithContext(fmt::format("working weights of block {}", b)));
    return lease->data();
  }
  STRATA_ASSIGN_OR_RETURN(*lease, LeaseParamBuffer());
  if (plan.format.MasterFromWorking()) {  // the weights being replaced hold the master (or its high halves)
    Tracer::Span s(m_.io.tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": reading its working weights");
    STRATA_RETURN_IF_ERROR(ReadWorkingInto(b, *lease).Wait().WithContext(fmt::format("working weights of block {}", b)));
  }
  return lease->data();
}

StatusOr<PinnedBuffer> UpdateWindow::LeaseParamBuffer() {
  std::optional<PinnedBuffer> got = m_.state.store->AcquireBuffer(*m_.state.pools.param);
  if (!got) got = m_.state.pools.param->AcquireFor(std::chrono::minutes(5));  // held by copies to the device
  if (!got) return Status(StatusCode::kInternal, "no pinned buffer for the working weights in 5 minutes");
  return std::move(*got);
}

StatusOr<std::array<std::span<std::byte>, 3>> UpdateWindow::StateSpans(int b, const SubGroup& sg, LoadedStates* cur) {
  if (!cur) {
    auto memory = [&](TensorHandle h) { return h.valid() ? m_.state.store->CpuMemory(h) : std::span<std::byte>(); };
    return std::array{memory(sg.master), memory(sg.m), memory(sg.v)};
  }
  for (Event& t : cur->read) {
    std::optional<Tracer::Span> wait;
    if (!t.Ready()) wait.emplace(m_.io.tracer, Track::kOptimizer, "adam b" + std::to_string(b) + ": waiting for its states");
    if (Status s = t.Wait(); !s.ok()) return s.WithContext(fmt::format("optimizer state of block {}", b));
  }
  std::array<std::span<std::byte>, 3> spans;
  for (int k = 0; k < 3; ++k) spans[k] = cur->buf[k].span().subspan(0, m_.plan.format.StoredStateBytes(k, sg.range.len));
  return spans;
}

// AdamW over one sub-group: its states from `cur` (read from NVMe) or the cpu tier, its
// fused half-precision (or fp32) output to `out`; states written back.
Status UpdateWindow::UpdateSubGroup(const AdamHyperParams& hp, int b, const SubGroup& sg, LoadedStates* cur,
                                    std::byte* out) {
  STRATA_ASSIGN_OR_RETURN(auto states, StateSpans(b, sg, cur));
  const StateFormat& format = m_.plan.format;
  const std::optional<AdamHyperParams> params = SubGroupParams(hp, b, sg);
  if (!params) {  // an expert not chosen: its states stay (not written back), its weights too
    format.KeepWeights(states, out, sg.range.len);
    return Status();
  }
  const AdamHyperParams& own = *params;
  std::vector<std::pair<size_t, size_t>> no_decay;
  const AdamSpans spans = SubGroupSpans(b, sg, states, out, own.step, &no_decay);
  {
    Tracer::Span s(m_.io.tracer, Track::kOptimizer, "adam b" + std::to_string(b));
    if (format.rule().per_tensor) STRATA_RETURN_IF_ERROR(StepTensors(own, b, sg, spans));
    else if (format.rule().whole_matrices) STRATA_RETURN_IF_ERROR(StepMuon(own, b, sg, spans));
    else STRATA_RETURN_IF_ERROR(AdamStep(own, spans, {.num_threads = threads_}));
    format.FinishUpdate(states, out, sg.range.len);
  }
  if (cur) {
    const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
    for (int k = 0; k < 3; ++k)
      if (format.StoresState(k)) (void)m_.state.store->WriteBack(hs[k], std::move(cur->buf[k]));
  }
  return Status();
}

AdamSpans UpdateWindow::SubGroupSpans(int b, const SubGroup& sg, const std::array<std::span<std::byte>, 3>& states,
                                      std::byte* out, int64_t step, std::vector<std::pair<size_t, size_t>>* no_decay) const {
  std::span<const float> grad;
  std::span<const uint16_t> grad_bf16;
  const BlockRuntime& br = m_.model.blocks[b];
  if (m_.plan.gsize == 2) grad_bf16 = AccumulatedGradient<uint16_t>(br, m_.plan.blocks[b], sg.range);
  else grad = AccumulatedGradient<float>(br, m_.plan.blocks[b], sg.range);
  AdamSpans spans =
      m_.plan.format.UpdateSpans(states, out, sg.range.len, grad, grad_bf16, seed_, step, b, sg.range.begin);
  no_decay->clear();  // strata.no_decay, in the sub-group's elements
  for (const auto& [lo, hi] : br.no_decay) {
    const int64_t from = std::max(lo, sg.range.begin), to = std::min(hi, sg.range.begin + sg.range.len);
    if (from < to) no_decay->emplace_back(from - sg.range.begin, to - sg.range.begin);
  }
  spans.no_decay = *no_decay;
  return spans;
}

// Block b is updated: its working weights to their home (or parked). Its gradients stay: the
// next step's first micro-batch overwrites them (Note [Gradient accumulation]).
Status UpdateWindow::FinishBlock(int b, PinnedBuffer lease, ParkingLot* park) {
  const BlockRuntime& br = m_.model.blocks[b];
  if (m_.plan.resident[b]) {
    STRATA_RETURN_IF_ERROR(UpdateResident(b, std::move(lease)));
  } else if (lease.valid() && park) {
    park->Put(b, std::move(lease));
  } else if (lease.valid()) {
    (void)m_.state.store->WriteBack(br.working, std::move(lease));  // reads of it wait for the write
  }
  return Status();
}

// The part of a resident block's working weights this rank updated (its optimizer range) is
// copied to the device, without blocking; with full weights on every rank (stages 1 and 2)
// the compute thread then shares the parts (ShareUpdatedWeights).
Status UpdateWindow::UpdateResident(int b, PinnedBuffer lease) {
  const BlockPlan& bp = m_.plan.blocks[b];
  const torch::Tensor& weights = m_.bufs.resident[b];
  const int64_t lo = bp.optimizer.begin - bp.working.begin;
  torch::Tensor part;
  STRATA_RETURN_IF_ERROR(TorchCall("resident update", [&] { part = weights.narrow(0, lo, bp.optimizer.len); }));
  // After the step's Synchronize nothing reads the old weights; the next copy in waits for this one.
  const Event copied = m_.io.dev->CopyIn(part, lease.data() + lo * m_.plan.dsize, {m_.bufs.resident_ready[b]});
  m_.io.ReleaseAfter(std::move(lease), copied);
  m_.bufs.resident_ready[b] = copied;  // read by the compute thread once block b is ready
  return Status();
}

std::unique_ptr<LoadedStates> UpdateWindow::LeaseStates(const SubGroup& sg) {
  auto l = std::make_unique<LoadedStates>();
  for (int k = 0; k < 3; ++k) {
    if (!m_.plan.format.StoresState(k)) continue;
    std::optional<PinnedBuffer> lease = m_.state.store->AcquireBuffer(*m_.state.pools.optim);
    STRATA_CHECK(lease) << "optimizer pool exhausted with no write-back in flight";
    l->buf[k] = std::move(*lease);
  }
  l->sub = &sg;
  return l;
}

std::unique_ptr<LoadedStates> UpdateWindow::LoadStates(const SubGroup& sg) {
  if (m_.state.store->home(sg.moment()) != Tier::kNvme) return nullptr;  // strata.host_blocks: updated in place
  std::unique_ptr<LoadedStates> l = LeaseStates(sg);
  const TensorHandle hs[3] = {sg.master, sg.m, sg.v};
  const StateFormat& format = m_.plan.format;
  for (int k = 0; k < 3; ++k)
    if (format.StoresState(k)) l->read[k] = m_.state.store->Read(hs[k], {l->buf[k].data(), format.StoredStateBytes(k, sg.range.len)});
  return l;
}

Status UpdateWindow::VisitStates(const std::vector<std::pair<int, const SubGroup*>>& order, const StateVisit& fn) {
  std::unique_ptr<LoadedStates> next = order.empty() ? nullptr : LoadStates(*order[0].second);
  for (size_t i = 0; i < order.size(); ++i) {
    std::unique_ptr<LoadedStates> cur = std::move(next);
    if (i + 1 < order.size()) next = LoadStates(*order[i + 1].second);
    STRATA_RETURN_IF_ERROR(fn(order[i].first, *order[i].second, cur.get()));  // (reads in flight: ~LoadedStates)
  }
  return Status();
}

void UpdateWindow::ReadStatesEarly() {
  // (LAMB's norm pass and Muon's directions read every state before the update: an early read
  // would be dropped.)
  if (!m_.state.pools.optim || m_.plan.format.rule().pre_pass()) return;
  // The NVMe sub-group after the last one read early, in update order (block by block; host
  // blocks' states are updated in place).
  const SubGroup* last = early_.empty() ? nullptr : early_.back()->sub;
  const SubGroup* next = nullptr;
  bool past = last == nullptr;
  for (const BlockRuntime& br : m_.model.blocks) {
    for (const SubGroup& sg : br.subs) {
      if (past && m_.state.store->home(sg.moment()) == Tier::kNvme) {
        next = &sg;
        break;
      }
      past = past || &sg == last;
    }
    if (next) break;
  }
  if (!next) return;  // all read
  for (TensorHandle h : {next->master, next->m, next->v})
    if (h.valid() && m_.state.store->WriteInFlight(h)) return;
  if (m_.state.pools.optim->free_count() < static_cast<size_t>(m_.plan.format.NumStoredStates())) return;
  early_.push_back(LoadStates(*next));
}

}  // namespace strata
