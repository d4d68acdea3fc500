#include "src/engine/shard_plan.h"

#include "src/engine/experts/expert_parts.h"

#include "src/engine/update/mode_facts.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "strata/check.h"
#include "strata/cpu_adam.h"
#include "strata/pinned_pool.h"

namespace strata {
namespace {

constexpr uint64_t kPage = 4096;
uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// SplitRange's step: sub-groups of whole kShardAlign multiples (the last may be shorter).
int64_t SubGroupStep(int64_t sub_group_size) {
  return std::max<int64_t>(kShardAlign, sub_group_size / kShardAlign * kShardAlign);
}

// The NVMe tier's staging buffers for unaligned pieces: min(queue_depth, 8) blocks.
uint64_t StagingBytes(const AioConfig& aio) {
  return static_cast<uint64_t>(std::min<int64_t>(aio.queue_depth, 8)) * static_cast<uint64_t>(aio.block_size);
}

}  // namespace

uint64_t MemoryLedger::Total(Tier r) const {
  uint64_t t = 0;
  for (int k = 0; k < kNumStateKinds; ++k) t += bytes[k][static_cast<int>(r)];
  return t;
}

uint64_t MemoryLedger::Of(StateKind k) const {
  return bytes[static_cast<int>(k)][0] + bytes[static_cast<int>(k)][1] + bytes[static_cast<int>(k)][2];
}

bool MemoryLedger::operator==(const MemoryLedger& o) const {
  return std::equal(&bytes[0][0], &bytes[0][0] + kNumStateKinds * kNumTiers, &o.bytes[0][0]);
}

uint64_t PoolPlan::region_bytes() const { return count ? PinnedPool::RegionBytes(count, buffer_bytes) : 0; }

ModelShape ModelShape::Of(const model::ModelConfig& config, int64_t params) {
  const model::ModelSpec spec(config);
  const double scale = params > 0 ? static_cast<double>(params) / static_cast<double>(spec.num_parameters()) : 1.0;
  auto scaled = [&](int64_t n) { return params > 0 ? static_cast<int64_t>(std::llround(n * scale)) : n; };
  ModelShape s;
  for (int b = 0; b < spec.num_blocks(); ++b) {
    s.block_numels.push_back(scaled(spec.block_parameters(b)));
    if (config.lora.enabled()) s.block_trainable.push_back(scaled(spec.trainable_parameters(b)));
    if (config.lora.nf4_base()) {
      s.block_nf4.push_back(scaled(spec.nf4_parameters(b)));
      s.block_nf4_bytes.push_back(scaled(spec.nf4_bytes(b)) / 4 * 4);
    }
    if (model::IsMoe(config)) {
      const model::ExpertSpan e = spec.experts(b);
      s.block_experts.push_back({scaled(e.begin), scaled(e.numel), e.count});
    }
  }
  if (auto tie = spec.tie()) {
    s.tied_owner = tie->owner_block;
    s.tied_numel = scaled(config.vocab_size * config.d_model);
  }
  return s;
}

ShardPlan ShardPlan::Make(const SettledConfig& cfg, const ModelShape& model, int world, int rank,
                          DeviceTraits device) {
  ShardPlan p;
  p.host_device = device.host;
  p.world = world;
  p.rank = rank;
  p.stage = cfg.zero_stage;
  p.weights_sharded = p.stage == 3;
  p.grads_sharded = p.stage >= 2;
  p.optim_sharded = p.stage >= 1;
  p.compute = cfg.compute_dtype;
  p.dsize = DTypeSize(cfg.compute_dtype);
  p.gsize = DTypeSize(cfg.grad_accum_dtype);
  p.working_home = cfg.offload_param.device;
  p.optimizer_home = cfg.offload_optimizer.device;
  if (p.optimizer_home == Tier::kNvme)
    p.host_blocks =  // ("auto" not yet settled: none)
        std::clamp<int64_t>(cfg.host_blocks, 0, static_cast<int64_t>(model.block_numels.size()));
  // The delayed update parks new working weights until the next step has read the old ones
  // from NVMe (Note [Delayed update]): there a host block keeps only its optimizer states.
  p.host_blocks_working = p.working_home == Tier::kNvme && !FactsOf(cfg).parks;
  p.tied_owner = model.tied_owner;
  p.tied_numel = model.tied_numel;
  p.creation_draws = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, world), 1, 4);
  for (size_t b = 0; b < model.block_numels.size(); ++b) {
    const int64_t numel = model.block_numels[b];
    // QLoRA: the NF4 weights' elements are stored as their blobs' bytes (Note [NF4 base]).
    const int64_t nf4 = model.block_nf4.empty() ? 0 : model.block_nf4[b];
    const int64_t stored = numel - nf4 + (nf4 > 0 ? model.block_nf4_bytes[b] / static_cast<int64_t>(p.dsize) : 0);
    p.max_block_numel = std::max(p.max_block_numel, numel);
    p.max_decoded = std::max(p.max_decoded, nf4);
    p.AddBlock(stored, model.block_trainable.empty() ? stored : model.block_trainable[b], SubGroupStep(cfg.sub_group_size));
    if (!model.block_experts.empty()) {  // (no NF4 with MoE)
      p.blocks.back().experts = model.block_experts[b];
      CutAtExperts(p.blocks.back());
    }
  }
  p.PlanDevice(cfg);
  p.fetch_routed = cfg.expert_fetch == ExpertFetch::kRouted && !cfg.keep_activations;
  p.format = StateFormat::Of(cfg, p.AnyResident());
  p.PlanOptimizerPool(cfg);
  p.PlanAdapters();
  p.PlanSpeculation(cfg);
  p.PlanLedger();
  return p;
}

// Each buffer holds one stored state of the largest sub-group: 4 B/element where an fp32
// master or fp32 moments are stored, a quarter of that for 8-bit moments beside a master kept
// in the working weights (the host memory saved goes to host blocks).
void ShardPlan::PlanOptimizerPool(const SettledConfig& cfg) {
  if (!StatesOnNvme(cfg) || max_sub_group == 0) return;
  uint64_t widest_state = 0;
  for (TensorRole r : kStateRoles)
    widest_state = std::max(widest_state, format.StoredBytes(r, max_sub_group));
  optim_pool = {12, RoundUp(widest_state, kPage), cfg.offload_optimizer.pin_memory};
}

// Some block's optimizer states live on NVMe (not every block is a host block).
bool ShardPlan::StatesOnNvme(const SettledConfig& cfg) const {
  return cfg.offload_optimizer.device == Tier::kNvme && host_blocks < static_cast<int64_t>(blocks.size());
}

void ShardPlan::PlanSpeculation(const SettledConfig& cfg) {
  speculative.assign(blocks.size(), false);
  if (!FactsOf(cfg).speculates) return;
  // The last blocks' gradients are final first: their updates overlap the most backward.
  uint64_t left = cfg.speculation_budget_mb < 0 ? UINT64_MAX : static_cast<uint64_t>(cfg.speculation_budget_mb) << 20;
  for (int b = static_cast<int>(blocks.size()) - 1; b >= 0 && SpeculationBackupBytes(b) <= left; --b) {
    if (blocks[b].optimizer.len == 0) continue;  // nothing to update (LoRA's frozen blocks)
    speculative[b] = true;
    left -= SpeculationBackupBytes(b);
  }
}

// `r` cut to [from, +inf): empty (at its end) when it lies before.
static ElementRange From(ElementRange r, int64_t from) {
  const int64_t begin = std::clamp(from, r.begin, r.end());
  return {begin, r.end() - begin};
}

void ShardPlan::AddBlock(int64_t numel, int64_t trainable, int64_t sub_group_step) {
  BlockPlan b;
  b.layout = MakeShardLayout(numel, world, rank);
  const ElementRange shard{b.layout.begin(), b.layout.shard}, whole{0, b.layout.padded};
  b.trainable_begin = trainable == 0 ? b.layout.padded : numel - trainable;  // frozen: not even the padding
  b.working = weights_sharded ? shard : whole;
  b.optimizer = From(optim_sharded ? shard : whole, b.trainable_begin);
  b.grad = From(grads_sharded ? shard : whole, b.trainable_begin);
  b.sub_group_step = sub_group_step;
  max_padded = std::max(max_padded, b.layout.padded);
  max_shard = std::max(max_shard, b.layout.shard);
  max_working_bytes = std::max<uint64_t>(max_working_bytes, b.working.len * dsize);
  max_sub_group = std::max(max_sub_group, std::min(b.sub_group_step, b.optimizer.len));
  blocks.push_back(std::move(b));
}

// BlockPlan::cuts: the optimizer range's pieces between its experts' boundaries, each split
// every sub_group_step elements.
void ShardPlan::CutAtExperts(BlockPlan& b) {
  const model::ExpertSpan& x = b.experts;
  if (x.count == 0 || b.optimizer.len == 0) return;
  std::vector<int64_t> ends;  // relative to optimizer.begin, ascending, the last the range's end
  for (int64_t e = 0; e <= x.count; ++e) {
    const int64_t at = x.begin + e * x.numel - b.optimizer.begin;
    if (at > 0 && at < b.optimizer.len) ends.push_back(at);
  }
  ends.push_back(b.optimizer.len);
  int64_t from = 0;
  for (int64_t end : ends) {
    for (int64_t at = from; at < end; at += b.sub_group_step) b.cuts.push_back(at);
    from = end;
  }
}

// Residency, buffers and pools, which depend on the device.
void ShardPlan::PlanDevice(const SettledConfig& cfg) {
  // Off the host, the first resident_blocks blocks ("auto": all of them when offload_param is
  // "none", else none) keep their working weights on the device; without residency a block
  // that is not offloaded lives in host memory (the cpu tier) and is copied in per use.
  const int n = static_cast<int>(blocks.size());
  const int64_t want = cfg.resident_blocks >= 0 ? cfg.resident_blocks
                       : cfg.offload_param.device == Tier::kDevice ? n : 0;
  int count = 0;
  for (int b = 0; b < n; ++b) {
    resident.push_back(!host_device && b < want);
    count += resident.back();
  }
  if (!host_device && working_home == Tier::kDevice) working_home = Tier::kCpu;
  // The CPU Adam updates the states in place, so off the host "none" keeps them in host memory
  // (the store's cpu tier) as "cpu" does; the ledger said "device" and the estimate counted them
  // in device memory while the process held them (a 7 B run on a GPU: 36.7 GB of host memory
  // estimated, 112 GB measured).
  if (!host_device && optimizer_home == Tier::kDevice) optimizer_home = Tier::kCpu;
  gather_slots = host_device ? 1 : (stage < 3 && count == n) ? 0 : 2;
  tied_slot = tied_owner >= 0 && !(stage < 3 && resident[tied_owner]);
  grad_slots = host_device ? 1 : 2;
  device_accum = !host_device && cfg.accumulate_on_device && cfg.grad_accum > 1;
  for (const BlockPlan& b : blocks) lora = lora || b.trainable_begin > 0;
  for (int b = 0; b < n; ++b) max_grad_flat = std::max(max_grad_flat, GradFlatLen(b));
  max_grad_reduced = lora ? 0 : max_shard;

  // Pinned pools: working-weight fetches from NVMe (at least 3 buffers: one computing, one
  // arriving, one being written back) and resident blocks' updated weights on their way to
  // the device. (The optimizer's pool, 3 states x (the sub-group being updated + the next one
  // being read + the write-backs of two), waits for the master's placement: PlanOptimizerPool.)
  const bool param_nvme = cfg.offload_param.device == Tier::kNvme;
  const bool optim_nvme = StatesOnNvme(cfg);
  if (param_nvme || count > 0)
    param_pool = {static_cast<size_t>(std::max<int64_t>(3, cfg.offload_param.buffer_count)), max_working_bytes,
                  cfg.offload_param.pin_memory};
  // Delayed update: a third of the blocks (at least 2) leaves the update ~n/3 blocks of slack
  // before the backward releases any; with accumulation every block, because the update must
  // take each block's gradients before the first micro-batch adds to them, and the old
  // weights are released only by the last one (Note [Delayed update]).
  if (FactsOf(cfg).parks && param_nvme)
    park_pool = {static_cast<size_t>(cfg.grad_accum > 1 ? n : std::max(2, n / 3)), max_working_bytes,
                 cfg.offload_param.pin_memory};
  if (param_nvme || optim_nvme) staging_bytes = StagingBytes(cfg.aio);
  scratch_bytes = static_cast<uint64_t>(grad_slots * (max_grad_flat + max_grad_reduced) + tied_numel) * 4;
  if (!host_device) {
    scratch_bytes += static_cast<uint64_t>((gather_slots + tied_slot) * max_shard) * dsize;
    grad_staging_bytes =
        static_cast<uint64_t>(grad_slots * (lora ? max_grad_flat : grads_sharded ? max_shard : max_padded)) * 4;
  }
}

// LoRA with NVMe working weights: a working range holding both frozen and trainable elements
// keeps its trainable end in host memory (BlockPlan::adapter).
void ShardPlan::PlanAdapters() {
  for (int i = 0; i < static_cast<int>(blocks.size()); ++i) {
    BlockPlan& b = blocks[i];
    const ElementRange tail = From(b.working, b.trainable_begin);
    if (b.trainable_begin > 0 && WorkingTier(i) == Tier::kNvme && tail.len > 0 && tail.len < b.working.len)
      b.adapter = tail;
  }
}

// The state tensors (Keys()), added up per block without listing them: a model of 1e15
// parameters has millions of sub-groups. Each NVMe extent takes its capacity on disk.
void ShardPlan::PlanLedger() {
  for (int i = 0; i < static_cast<int>(blocks.size()); ++i) {
    const BlockPlan& b = blocks[i];
    const uint64_t working = b.working_tensor_len() * dsize;
    ledger.Add(StateKind::kWorking, WorkingTier(i), working);
    ledger.Add(StateKind::kWorking, Tier::kCpu, b.adapter.len * dsize);
    if (WorkingTier(i) == Tier::kNvme) {  // one extent, or one per part
      const std::vector<WorkingPart> parts = PartsOfWorking(*this, i);
      if (parts.empty()) nvme_on_disk += RoundUp(working, kPage);
      for (const WorkingPart& part : parts) nvme_on_disk += RoundUp(part.len * dsize, kPage);
    }
    const int64_t n = b.num_sub_groups(), full = b.optimizer.len / b.sub_group_step;
    for (auto [k, role] : {std::pair{StateKind::kMaster, TensorRole::kMaster}, std::pair{StateKind::kAdamM, TensorRole::kAdamM},
                           std::pair{StateKind::kAdamV, TensorRole::kAdamV}}) {
      const bool nvme = OptimizerTier(i) == Tier::kNvme;
      if (!b.cuts.empty()) {  // a sparse layer's: one by one
        for (int64_t g = 0; g < n; ++g) {
          const uint64_t bytes = format.StoredBytes(role, b.sub_group(g).len);
          ledger.Add(k, OptimizerTier(i), bytes);
          if (nvme) nvme_on_disk += RoundUp(bytes, kPage);
        }
        continue;
      }
      const uint64_t full_bytes = format.StoredBytes(role, b.sub_group_step),
                     tail_bytes = format.StoredBytes(role, b.optimizer.len - full * b.sub_group_step);
      ledger.Add(k, OptimizerTier(i), full * full_bytes + tail_bytes);
      if (nvme) nvme_on_disk += full * RoundUp(full_bytes, kPage) + (n > full ? RoundUp(tail_bytes, kPage) : 0);
    }
    ledger.Add(StateKind::kGradAccum, Tier::kCpu, b.grad.len * gsize);
    if (device_accum) ledger.Add(StateKind::kGradAccum, Tier::kDevice, b.grad.len * 4);
    if (speculative[i]) ledger.Add(StateKind::kSpeculationBackup, Tier::kCpu, SpeculationBackupBytes(i));
  }
  if (format.rule().whole_matrices) {  // (UpdateWindow::SetMuonTensors)
    uint64_t elements = static_cast<uint64_t>(max_padded);
    for (const BlockPlan& b : blocks) elements += static_cast<uint64_t>(b.optimizer.len);
    ledger.Add(StateKind::kMuonUpdates, Tier::kCpu, elements * 4);
  }
  const int64_t tied_padded = tied_slot ? blocks[tied_owner].layout.padded : 0;
  ledger.Add(StateKind::kGatherBuffers, Tier::kDevice,
             (gather_slots * max_padded + tied_padded + decode_slots() * max_decoded) * dsize);
  ledger.Add(StateKind::kPinnedBuffers, Tier::kCpu,
             param_pool.region_bytes() + optim_pool.region_bytes() + park_pool.region_bytes());
}

std::vector<Visit> ShardPlan::Visits(int micro_batches, bool backward) const {
  const int n = static_cast<int>(blocks.size());
  std::vector<Visit> order;
  for (int mb = 0; mb < micro_batches; ++mb) {
    for (int b = 0; b < n - 1; ++b) order.push_back({b, tied_slot && b == tied_owner});
    if (tied_owner >= 0 && !tied_slot) order.push_back({tied_owner, false});
    order.push_back({n - 1, false});
    if (backward)
      for (int b = n - 2; b >= 0; --b)
        if (b > 0 || !Frozen(0)) order.push_back({b, false});
  }
  return order;
}

Status ShardPlan::CheckFormats(const SettledConfig& c) const { return StateFormat::Check(c, AnyResident()); }

Tier ShardPlan::WorkingTier(int b) const {
  if (resident.at(b)) return Tier::kDevice;
  return HostBlock(b) && host_blocks_working ? Tier::kCpu : working_home;
}

bool ShardPlan::HostBlock(int b) const { return b < host_blocks; }

Tier ShardPlan::OptimizerTier(int b) const {
  return optimizer_home == Tier::kNvme && HostBlock(b) ? Tier::kCpu : optimizer_home;
}

std::vector<TensorKey> ShardPlan::Keys() const {
  std::vector<TensorKey> keys;
  for (int b = 0; b < static_cast<int>(blocks.size()); ++b) {
    keys.push_back({b, TensorRole::kWorking, 0});
    if (blocks[b].adapter.len > 0) keys.push_back({b, TensorRole::kAdapter, 0});
    for (int64_t i = 0; i < blocks[b].num_sub_groups(); ++i)
      for (TensorRole r : kStateRoles)
        if (r == TensorRole::kMaster || format.Stores(r)) keys.push_back({b, r, blocks[b].sub_group(i).begin});
  }
  return keys;
}

size_t ShardPlan::NumKeys() const {
  size_t n = 0;
  const size_t per_sub_group = 1 + format.rule().moments();  // the master (as checkpoints hold it) and the moments
  for (const BlockPlan& b : blocks) n += 1 + (b.adapter.len > 0) + per_sub_group * static_cast<size_t>(b.num_sub_groups());
  return n;
}

int64_t ShardPlan::SubGroupLen(const TensorKey& key) const {
  STRATA_CHECK(key.block >= 0 && key.block < static_cast<int>(blocks.size())) << "block " << key.block;
  const BlockPlan& b = blocks[key.block];
  const int64_t rel = key.offset - b.optimizer.begin;
  const auto cut = std::lower_bound(b.cuts.begin(), b.cuts.end(), rel);
  const bool found = b.cuts.empty() ? rel % b.sub_group_step == 0 : cut != b.cuts.end() && *cut == rel;
  STRATA_CHECK(rel >= 0 && rel < b.optimizer.len && found)
      << "no optimizer sub-group of block " << key.block << " starts at " << key.offset;
  return b.sub_group(b.cuts.empty() ? rel / b.sub_group_step : cut - b.cuts.begin()).len;
}

uint64_t ShardPlan::TensorBytes(const TensorKey& key) const {
  const int64_t len = key.role == TensorRole::kWorking   ? blocks.at(key.block).working_tensor_len()
                      : key.role == TensorRole::kAdapter ? blocks.at(key.block).adapter.len
                                                         : SubGroupLen(key);
  return len * format.VisitedBytes(key.role);
}

}  // namespace strata
