// ShardPlan: everything about one rank's training state that follows from the config, the
// model's block sizes and the world, computed before anything is allocated: each block's
// flat group and this rank's working, optimizer and gradient ranges, the optimizer
// sub-groups, the store's tensors (by TensorKey), the pinned pools, the scratch buffers and
// the memory ledger. Pure arithmetic, no LibTorch, no I/O.
//
// The Engine executes a plan (and checks that what it allocates is what the plan says);
// `strata estimate` adds plans up. So the estimator's per-tier bytes are the engine's, to
// the byte, by construction rather than by a second copy of the rules.
//
//   per block b, rank r of W:   flat group [0, padded) = W shards of `shard` elements
//     working     stage 3: [r*shard, +shard)   else [0, padded)     compute dtype
//     optimizer   stage>=1: [r*shard, +shard)  else [0, padded)     the master and Adam's m and
//                                                                  v, as the StateFormat stores them,
//                 split into sub-groups of sub_group_size elements (kShardAlign multiples)
//     gradient    stage>=2: [r*shard, +shard)  else [0, padded)     fp32 accumulator (host)
//   with LoRA the optimizer and gradient ranges are cut to the trainable tail [trainable_begin,
//   padded) (the adapters, Note [Block parameters]): the frozen base has working weights only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/config/train_config.h"
#include "src/engine/state_format.h"
#include "src/engine/tensor_key.h"
#include "strata/flat_group.h"

namespace strata {

// Bytes this rank holds, by what they are and where they live. On a CPU build "device"
// is host memory that is not offloaded (offload device "none").
enum class StateKind {
  kWorking, kMaster, kAdamM, kAdamV, kGradAccum, kGatherBuffers, kPinnedBuffers,
  kSpeculationBackup,  // strata.optimizer_overlap "speculative": what a roll-back restores
  kMuonUpdates,        // Muon: this rank's o between its two passes, and one block's u (Note [Muon])
};
inline constexpr int kNumStateKinds = 9;
struct MemoryLedger {
  uint64_t bytes[kNumStateKinds][kNumTiers] = {};  // by StateKind and Tier (strata/tier.h)
  void Add(StateKind k, Tier r, uint64_t n) { bytes[static_cast<int>(k)][static_cast<int>(r)] += n; }
  uint64_t Total(Tier r) const;
  uint64_t Of(StateKind k) const;
  uint64_t At(StateKind k, Tier r) const { return bytes[static_cast<int>(k)][static_cast<int>(r)]; }
  bool operator==(const MemoryLedger& o) const;
};

struct BlockPlan {
  ShardLayout layout;       // the flat group and this rank's shard
  ElementRange working;     // this rank's working weights (compute dtype)
  ElementRange optimizer;   // this rank's optimizer range (fp32 master, m, v) ...
  int64_t sub_group_step = 0;  // ... in sub-groups of this many elements (the last may be shorter)
  ElementRange grad;        // this rank's gradient accumulator (fp32 or bf16)
  int64_t trainable_begin = 0;  // LoRA: where the adapters start (before: frozen); padded with none; else 0
  // LoRA with the working weights on NVMe: the trainable end of the working range, kept in
  // host memory as its own tensor (kAdapter) so that an update never rewrites the frozen
  // base on disk; the kWorking tensor is then [working.begin, adapter.begin). Else empty.
  ElementRange adapter;
  model::ExpertSpan experts;  // a sparse layer's experts (Note [Expert-aware fetching]); count 0 else
  int64_t working_tensor_len() const { return working.len - adapter.len; }

  // A sparse layer's sub-groups also end where its experts do, so that each lies in one expert
  // or in none (Note [Expert updates]: with "chosen" an expert no token chose is not updated): where
  // they start, relative to optimizer.begin. Empty: every sub_group_step elements.
  std::vector<int64_t> cuts;

  int64_t num_sub_groups() const {
    return cuts.empty() ? (optimizer.len + sub_group_step - 1) / sub_group_step : static_cast<int64_t>(cuts.size());
  }
  ElementRange sub_group(int64_t i) const {
    if (!cuts.empty()) {
      const int64_t end = i + 1 < static_cast<int64_t>(cuts.size()) ? cuts[i + 1] : optimizer.len;
      return {optimizer.begin + cuts[i], end - cuts[i]};
    }
    const int64_t lo = i * sub_group_step;
    return {optimizer.begin + lo, std::min(sub_group_step, optimizer.len - lo)};
  }
  // The expert holding flat element `at` (-1: none).
  int ExpertAt(int64_t at) const {
    return at >= experts.begin && at < experts.end() ? static_cast<int>((at - experts.begin) / experts.numel) : -1;
  }
};

// A pinned pool: `count` buffers of buffer_bytes (rounded up to 4 KiB when allocated).
struct PoolPlan {
  size_t count = 0;  // 0: no pool
  size_t buffer_bytes = 0;
  bool pin = true;
  uint64_t region_bytes() const;
};

// What the plan needs of a model: each block's parameter count, and the tied weight (the
// head borrows the owner block's [V, C] table) if any.
struct ModelShape {
  std::vector<int64_t> block_numels;
  std::vector<int64_t> block_trainable;  // trainable elements at the end of each block (LoRA); empty: all
  // QLoRA: per block the elements of its NF4 weights and the bytes of their blobs (a multiple
  // of 4): the flat group holds the bytes in their place (Note [NF4 base]). Empty: none.
  std::vector<int64_t> block_nf4, block_nf4_bytes;
  // Mixtures of experts: per block its experts' span (count 0: dense). Empty: no sparse layer.
  std::vector<model::ExpertSpan> block_experts;
  int tied_owner = -1;        // block whose padded group the second gather buffer holds
  int64_t tied_numel = 0;     // elements of the tied weight (its pending fp32 gradient)
  // The config's model, or rescaled so that it has `params` parameters (> 0; the
  // `estimate --params N` form: every block scaled alike).
  static ModelShape Of(const model::ModelConfig& config, int64_t params = 0);
};

// What the plan needs of the compute device.
struct DeviceTraits {
  // Blocks run on the host on host buffers (the CPU build's device): one gather buffer, no
  // copies, no device residency. Otherwise (a GPU, the fake device) gathers and gradient
  // reductions are double-buffered, and working weights may be resident on the device.
  bool host = true;
};

// One visit of the step's plan: a block's weights gathered for forward, head or backward
// (into the tied slot for the tied owner during the head).
struct Visit {
  int block = 0;
  bool tied = false;
};

struct ShardPlan {
  int world = 1, rank = 0, stage = 3;
  bool weights_sharded = true, grads_sharded = true, optim_sharded = true;
  DType compute = DType::kF32;
  size_t dsize = 4;  // bytes per working-weight element
  size_t gsize = 4;  // bytes per element of the gradient accumulators (strata.gradient_accumulator)
  // How the master and the moments are stored (state_format.h: the only place that knows).
  StateFormat format;
  Tier working_home = Tier::kDevice, optimizer_home = Tier::kDevice;
  std::vector<BlockPlan> blocks;
  int tied_owner = -1;
  int64_t tied_numel = 0;
  int64_t max_padded = 0, max_shard = 0, max_sub_group = 0;
  // The most parameters of a block as the model computes with them (its creation staging), and
  // the most NF4 elements a block dequantises for compute (QLoRA; else 0).
  int64_t max_block_numel = 0, max_decoded = 0;
  // Dequantisation buffers (compute dtype, max_decoded elements each), one per gather buffer:
  // a block's NF4 weights live there while it runs.
  int64_t staging_numel() const { return std::max(max_padded, max_block_numel); }  // fp32 creation staging
  int decode_slots() const { return max_decoded > 0 ? std::max(1, gather_slots) : 0; }
  uint64_t max_working_bytes = 0;
  bool host_device = true;
  // Blocks whose initial weights are drawn at once while the engine is created (Note
  // [Building blocks]): one per core of a rank (the node's cores over the ranks), at most 4.
  // Each has a staging set, and one more set is being written: draws + 1 sets.
  int creation_draws = 1;
  // Blocks whose working weights live on the device (strata.resident_blocks; non-host
  // devices only): no store home, no copy per use; updated by one copy per step.
  std::vector<bool> resident;
  // Mixtures of experts (Note [Expert-aware fetching]): a sparse layer's block fetches its
  // routed experts only (strata.expert_fetch "routed") where it is recomputed in the backward
  // (no kept activations) and kept off the device between uses; its working tensor is then in
  // parts (expert_parts.h). With ZeRO-3 over several ranks the ranks gather the experts some
  // rank's tokens chose, each rank's pieces broadcast from it.
  bool fetch_routed = false;
  bool FetchesRouted(int b) const { return fetch_routed && blocks[b].experts.count > 0 && !resident[b]; }
  bool AnyResident() const { return std::find(resident.begin(), resident.end(), true) != resident.end(); }
  int gather_slots = 1;       // gather buffers of the largest padded group (0: every block resident, stage < 3)
  bool tied_slot = false;     // a gather buffer for the tied owner during the head
  int grad_slots = 1;         // flat-gradient / reduced-shard buffer pairs
  // strata.device_accumulation settled on (off the host, accumulation > 1): each block's
  // gradient range also has an fp32 accumulator on the device.
  bool device_accum = false;
  // LoRA (a block's trainable_begin > 0): only each block's trainable end is flattened, and it
  // is all-reduced in place (it lies on the last rank(s) of a sharded group, and is small).
  bool lora = false;
  int64_t max_grad_flat = 0;     // elements of a flat-gradient buffer: max_padded, or the longest trainable end
  int64_t max_grad_reduced = 0;  // elements of a reduced-shard buffer: max_shard, or 0 (LoRA)
  // Where block b's flat gradient starts in its group, and its length (0: frozen, none).
  int64_t GradFlatBegin(int b) const { return lora ? std::min(blocks[b].trainable_begin, blocks[b].layout.padded) : 0; }
  int64_t GradFlatLen(int b) const { return blocks[b].layout.padded - GradFlatBegin(b); }
  // No rank has a gradient of block b (LoRA: a block without adapters, e.g. the head).
  bool Frozen(int b) const { return blocks[b].trainable_begin >= blocks[b].layout.numel; }
  // Gradients are reduce-scattered (stages 2-3, several ranks, no LoRA), else all-reduced or,
  // alone, kept as flattened.
  bool ScattersGradients() const { return grads_sharded && !lora && world > 1; }
  // Each rank holds a shard of the working weights, gathered from every rank for each use.
  bool GathersAcrossRanks() const { return weights_sharded && world > 1; }
  // The blocks whose working weights the micro-batches read, in order: forward 0..N-2 (the
  // tied owner into its own slot, where the head finds it again: read once for both), the
  // head, then, when training, backward N-2..0 (LoRA: a frozen embedding has none).
  std::vector<Visit> Visits(int micro_batches, bool backward) const;
  // strata.optimizer_overlap "speculative": the blocks updated during the backward, from the
  // last one down while their backups fit strata.speculation_budget_mb (host memory).
  std::vector<bool> speculative;
  PoolPlan param_pool;  // working-weight fetches and write-backs (NVMe), and resident blocks' updates
  PoolPlan optim_pool;  // NVMe optimizer-state sub-groups (offload_optimizer nvme)
  // strata.optimizer_overlap "delayed": updated working weights parked until the next step has
  // read the old ones (a third of the blocks, at least 2: ParkedWrites)
  PoolPlan park_pool;
  uint64_t staging_bytes = 0;  // the NVMe tier's staging buffers (host)
  // Scratch on the compute device: per gradient slot the fp32 flat gradient of the largest
  // block and the reduced shard, the tied weight's pending fp32 gradient, and off the host
  // per gather slot the working shard before its all-gather.
  uint64_t scratch_bytes = 0;
  // Off the host: pinned host copies of the reduced gradient shards, one per gradient slot.
  uint64_t grad_staging_bytes = 0;
  uint64_t nvme_on_disk = 0;   // swap file space, extents placed as the NVMe tier places them
  MemoryLedger ledger;         // what the engine allocates, per state kind and residence

  // `cfg` supplies the stage, the offload homes and pools, sub_group_size, the compute dtype
  // and the aio settings.
  static ShardPlan Make(const SettledConfig& cfg, const ModelShape& model, int world, int rank,
                        DeviceTraits device = {});
  // The state formats with what is known once the precision and the plan are (the split
  // master needs bf16 compute and no block's working weights on the device).
  Status CheckFormats(const SettledConfig& cfg) const;
  // Where block b's working weights live: the device for resident blocks, else their home.
  Tier WorkingTier(int b) const;
  // strata.host_blocks (only with offload_optimizer "nvme"): the first host_blocks blocks keep
  // their optimizer states in host memory, and their working weights too when those are on
  // NVMe (host_blocks_working; not with the delayed update). The first: the update starts at
  // block 0, so theirs are done at once (no disk) and the next forward runs them while the
  // update of the blocks on NVMe goes on at the disk's pace; and the backward ends with them,
  // leaving the disk to the early reads of the update's first states.
  int64_t host_blocks = 0;
  bool host_blocks_working = false;
  bool HostBlock(int b) const;
  // Where block b's optimizer states live: optimizer_home, or host memory for a host block.
  Tier OptimizerTier(int b) const;
  // Block b's speculation backup: its optimizer range's master, m and v before the update
  // and the update's working weights until the step is known to stand (compute dtype).
  uint64_t SpeculationBackupBytes(int b) const { return format.BackupBytes(blocks[b].optimizer.len); }

 private:
  void AddBlock(int64_t numel, int64_t trainable, int64_t sub_group_step);
  static void CutAtExperts(BlockPlan& b);
  void PlanAdapters();
  void PlanDevice(const SettledConfig& cfg);
  void PlanOptimizerPool(const SettledConfig& cfg);
  bool StatesOnNvme(const SettledConfig& cfg) const;
  void PlanSpeculation(const SettledConfig& cfg);
  void PlanLedger();

 public:

  // The store's tensors of this rank in a fixed order (VisitState's and the checkpoints'):
  // per block its working weights, then per sub-group master, m, v.
  std::vector<TensorKey> Keys() const;
  size_t NumKeys() const;  // Keys().size(), without listing them
  uint64_t TensorBytes(const TensorKey& key) const;
  int64_t SubGroupLen(const TensorKey& key) const;  // elements of an optimizer state's sub-group
};

}  // namespace strata
