#include "src/checkpoint/reshard.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"
#include "src/engine/shard_plan.h"

namespace strata::ckpt {
namespace {

// A piece of one old rank's tensor: flat elements [begin, begin + len) of its block's group.
struct Piece {
  int64_t begin = 0, len = 0;
  const std::byte* data = nullptr;
};
using PieceIndex = std::map<std::pair<int, TensorRole>, std::vector<Piece>>;

// The flat range a key covers in `plan`: the working range, or the optimizer sub-group
// starting at key.offset (checked against the plan's keys first).
ElementRange RangeOf(const ShardPlan& plan, const TensorKey& key) {
  const BlockPlan& b = plan.blocks[key.block];
  if (key.role == TensorRole::kWorking) return {b.working.begin, b.working_tensor_len()};
  if (key.role == TensorRole::kAdapter) return b.adapter;
  return {key.offset, plan.SubGroupLen(key)};
}

// Working weights are one range of the flat group whether a run kept them in one tensor or
// split off an adapter tensor (LoRA): pieces of both serve either.
TensorRole IndexRole(TensorRole r) { return r == TensorRole::kAdapter ? TensorRole::kWorking : r; }

// The old run's configuration: this one's, partitioned as the manifest says.
TrainConfig OldConfig(const nlohmann::json& m, const TrainConfig& cfg) {
  TrainConfig old = cfg;
  old.zero_stage = m.at("zero_stage").get<int>();
  old.sub_group_size = m.at("sub_group_size").get<int64_t>();
  return old;
}

// Indexes every tensor of old rank q's file by (block, role) and flat range.
Status IndexRankFile(const SafetensorsFile& f, const ShardPlan& plan, PieceIndex* index) {
  std::vector<TensorKey> keys = plan.Keys();
  for (const TensorView& t : f.tensors()) {
    const std::optional<TensorKey> key = TensorKey::Parse(t.name);
    const bool split_off = key && key->role == TensorRole::kAdapter && key->block < static_cast<int>(plan.blocks.size()) &&
                           plan.blocks[key->block].trainable_begin > 0;  // (a LoRA run's, wherever it was)
    if (!key || (!split_off && std::find(keys.begin(), keys.end(), *key) == keys.end()))
      return Error(StatusCode::kDataLoss, "'{}': tensor '{}' is not part of the state its manifest describes", f.path(),
                   t.name);
    ElementRange r = RangeOf(plan, *key);
    const bool working = key->role == TensorRole::kWorking || key->role == TensorRole::kAdapter;
    if (working && plan.blocks[key->block].trainable_begin > 0) {
      // LoRA: where the old run split its working range depends on where it kept it (not in
      // the manifest); the sizes say: "working" starts the range, "adapter" ends it.
      const ElementRange w = plan.blocks[key->block].working;
      const int64_t n = static_cast<int64_t>(t.bytes.size() / plan.dsize);
      if (n <= w.len) r = key->role == TensorRole::kWorking ? ElementRange{w.begin, n} : ElementRange{w.end() - n, n};
    }
    if (t.bytes.size() != r.len * plan.format.VisitedBytes(key->role))
      return Error(StatusCode::kDataLoss, "'{}': tensor '{}' has {} bytes, {} elements expected", f.path(), t.name,
                   t.bytes.size(), r.len);
    (*index)[{key->block, IndexRole(key->role)}].push_back({r.begin, r.len, t.bytes.data()});
  }
  return Status();
}

// Fills `out` (range r of block b, role) from the pieces; the real elements (< numel) must
// all be covered.
Status Assemble(const std::vector<Piece>& pieces, ElementRange r, int64_t numel, size_t esize, const TensorKey& key,
                std::vector<std::byte>* out) {
  out->assign(static_cast<size_t>(r.len) * esize, std::byte{0});
  int64_t covered = r.begin;  // pieces are sorted by begin
  const int64_t need = std::min(r.end(), numel);
  for (const Piece& p : pieces) {
    const int64_t lo = std::max(p.begin, r.begin), hi = std::min(p.begin + p.len, r.end());
    if (lo >= hi) continue;
    if (lo > covered && covered < need) break;  // a gap
    std::memcpy(out->data() + (lo - r.begin) * esize, p.data + (lo - p.begin) * esize, (hi - lo) * esize);
    covered = std::max(covered, hi);
  }
  if (covered < need)
    return Error(StatusCode::kDataLoss, "no rank file of the checkpoint holds element {} of block {} (for '{}')",
                 covered, key.block, key.Name());
  return Status();
}

}  // namespace

bool NeedsResharding(const nlohmann::json& m, const TrainConfig& cfg, int world) {
  // With LoRA the working weights' split (BlockPlan::adapter) also depends on where they live,
  // which the manifest does not say: the piecewise restore serves every placement.
  return cfg.model.lora.enabled() || m.at("world_size").get<int>() != world || m.at("zero_stage").get<int>() != cfg.zero_stage ||
         m.at("sub_group_size").get<int64_t>() != cfg.sub_group_size;
}

Status RestoreResharded(Engine& engine, const TrainConfig& cfg, const nlohmann::json& m, const std::string& step_dir) {
  const int old_world = m.at("world_size").get<int>();
  const TrainConfig old_cfg = OldConfig(m, cfg);
  const ModelShape shape = ModelShape::Of(cfg.model);
  std::vector<SafetensorsFile> files;  // mapped, read only where a piece is needed
  PieceIndex index;
  for (int q = 0; q < old_world; ++q) {
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, OpenRankFile(step_dir, m, q));
    files.push_back(std::move(f));
    const ShardPlan old_plan = ShardPlan::Make(SettledConfig(old_cfg), shape, old_world, q);  // (layouts: as written)
    STRATA_RETURN_IF_ERROR(IndexRankFile(files.back(), old_plan, &index));
  }
  for (auto& [where, pieces] : index)
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  const ShardPlan& plan = engine.plan();
  std::vector<std::byte> bytes;
  for (const TensorKey& key : plan.Keys()) {
    const ElementRange r = RangeOf(plan, key);
    Status s = Assemble(index[{key.block, IndexRole(key.role)}], r, plan.blocks[key.block].layout.numel,
                        plan.format.VisitedBytes(key.role), key, &bytes);
    if (s.ok()) s = engine.RestoreState(key, bytes);
    if (!s.ok()) return s.WithContext(step_dir);
  }
  return Status();
}

}  // namespace strata::ckpt
