// StateFormat: the one place that knows how a rank's optimizer state is stored. The plan,
// the engine's creation and update, the speculation backups and the checkpoint's visit and
// restore ask it; nothing else decides by a format.
//
//   master   kFp32       its own fp32 tensor per sub-group (4 B)
//            kSplit      the bf16 working weights are its high halves; its own tensor holds
//                        the 16-bit low halves (2 B; Note [Split master], strata/cpu_adam.h)
//            kInWorking  fp32 compute: the working weights are the master, stored once (0 B)
//   moments  kFp32       the optimizer's moments in fp32 (4 B each: Adam m and v, Lion m,
//                        Adagrad v; which ones: its OptimizerRule)
//            kBf16       in bf16 with stochastic rounding (2 B each)
//            k8Bit       one byte plus an fp32 scale per 256 elements (Note [8-bit moments])
// Checkpoints see every master as fp32 and 8-bit moments as the fp32 values they hold, so a
// run resumes from another format where the formats allow (VisitedBytes, Visit, Restore).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/config/train_config.h"
#include "src/engine/optimizer_rule.h"
#include "src/engine/tensor_key.h"
#include "strata/cpu_adam.h"
#include "strata/dtype.h"

namespace strata {

enum class MasterFormat { kFp32, kSplit, kInWorking };
enum class MomentFormat { kFp32, kBf16, k8Bit };

class StateFormat {
 public:
  StateFormat() = default;
  StateFormat(MasterFormat master, MomentFormat moments, DType compute, OptimizerKind optimizer = OptimizerKind::kAdam)
      : master_(master), moments_(moments), compute_(compute), rule_(&RuleOf(optimizer)) {}
  // The formats of a settled config; `any_resident`: some block's working weights live on
  // the device (then the master cannot be kept in them).
  static StateFormat Of(const TrainConfig& cfg, bool any_resident);
  // What the formats asked for need, with what is known once the precision and the plan are:
  // the split master needs bf16 compute and no block's working weights on the device.
  static Status Check(const TrainConfig& cfg, bool any_resident);

  MasterFormat master() const { return master_; }
  MomentFormat moments() const { return moments_; }
  DType compute() const { return compute_; }
  const OptimizerRule& rule() const { return *rule_; }
  size_t working_bytes() const { return DTypeSize(compute_); }  // per working-weight element
  // "fp32", "bf16", "8bit": strata.adam_states as the run kept them (checkpoints record it).
  const char* MomentsName() const;
  // What the master's row of a memory table holds: "fp32 master weights", "master low halves
  // (split)", "fp32 master (= working)".
  const char* MasterDescription() const;
  // The dtype checkpoints hold m and v in (8-bit moments: their fp32 values).
  DType VisitedMomentDType() const { return moments_ == MomentFormat::kBf16 ? DType::kBF16 : DType::kF32; }
  // The dtype a checkpoint holds `role` in.
  DType VisitedDType(TensorRole role) const;

  // The master has a tensor of its own (not kInWorking).
  bool MasterStored() const { return master_ != MasterFormat::kInWorking; }
  // The update rebuilds the master from the working weights it replaces (kSplit, kInWorking).
  bool MasterFromWorking() const { return master_ != MasterFormat::kFp32; }
  // Whether a sub-group stores `role` (the master, or a moment slot its optimizer keeps), and
  // state k of a sub-group (0 master, 1 m, 2 v); how many it stores.
  bool Stores(TensorRole role) const;
  bool StoresState(int k) const;
  int NumStoredStates() const { return MasterStored() + rule_->moments(); }
  int FirstStoredState() const { return MasterStored() ? 0 : rule_->keeps_m ? 1 : 2; }
  // What the memory table's row of `role` holds ("Adam m", "Lion momentum", ...).
  const char* RowName(TensorRole role) const;

  // Bytes per element of `role` as checkpoints hold it (a slot it does not keep: as if kept).
  size_t VisitedBytes(TensorRole role) const;
  // Bytes the store holds for `len` elements of `role` (0 where it stores none).
  uint64_t StoredBytes(TensorRole role, int64_t len) const;
  // Bytes of state k (0 master, 1 m, 2 v) of `len` elements, as stored.
  uint64_t StoredStateBytes(int k, int64_t len) const;
  // A speculative update's backup of `len` elements: master, m and v as visited, and the
  // updated working weights.
  uint64_t BackupBytes(int64_t len) const;

  // Creation. The working range's fp32 `values` (`len` of them) become what the store keeps:
  // kSplit writes the bf16 working weights to `working_out` and the low halves over `values`
  // (returns true); the others leave both (false: the caller converts to the compute dtype).
  bool SplitInPlace(float* values, int64_t len, uint16_t* working_out) const;
  // The initial bytes of the master of `sub` (flat elements): from `flat` (the block's fp32
  // group, its working range split in place by SplitInPlace for kSplit); empty for kInWorking.
  std::span<const std::byte> InitialMaster(const float* flat, ElementRange working, ElementRange sub) const;

  // The update of one sub-group of `len` elements: `states` as stored (master empty for
  // kInWorking), `out` its working weights (read first where the master is rebuilt from
  // them; written with the updated ones), `grad` (fp32 or bf16 bits). The moments' rounding
  // bits come from the run's `seed`, Adam's `step`, the `block` and the sub-group's first flat
  // element (Note [Stochastic rounding of the moments]).
  AdamSpans UpdateSpans(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len,
                        std::span<const float> grad, std::span<const uint16_t> grad_bf16, uint64_t seed, int64_t step,
                        int block, int64_t first) const;
  // After AdamStep: fp32 compute with a master of its own copies it to the working weights.
  // A sub-group left as it is (an expert no token chose): `out` gets the working weights its
  // stored master stands for, as an update would have written them; where `out` holds them
  // already (the master kept in or beside the working weights), nothing.
  void KeepWeights(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len) const;
  void FinishUpdate(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len) const;

  // The fp32 master of `len` elements from its stored bytes and the working weights that
  // hold it (or its high halves); one of the two may be empty where the format needs it not.
  void ReadMaster(std::span<const std::byte> working, std::span<const std::byte> stored, std::span<float> dst) const;
  // A checkpoint's fp32 master written back: the working weights it rounds to (kSplit: its
  // high halves; kInWorking: itself) into `working`, and its stored bytes into `stored`
  // (empty for kInWorking).
  void WriteMaster(std::span<const float> fp32, std::span<std::byte> working, std::span<std::byte> stored) const;

  // A moment's stored bytes as checkpoints hold them (8-bit: decoded to fp32), and back
  // (8-bit: encoded to the nearest codes, which gives back the blob Visit decoded).
  std::vector<std::byte> Visit(TensorRole role, std::span<const std::byte> stored, int64_t len) const;
  std::vector<std::byte> Restore(TensorRole role, std::span<const std::byte> visited, int64_t len) const;
  // Whether Visit and Restore change the bytes of `role` (8-bit moments).
  bool Converts(TensorRole role) const;

  // Resuming from a checkpoint whose moments are in `saved` ("fp32", "bf16": its adam_states,
  // the dtype it holds them in) and were kept by its run as `saved_run` ("" when not recorded,
  // or "fp32", "bf16", "8bit"): an error where this run cannot (`where` names the manifest),
  // else a note to say where the run changes how it keeps them ("" when it does not).
  Status CheckResume(const std::string& saved, const std::string& where) const;
  std::string ResumeNote(const std::string& saved_run) const;

 private:
  MasterFormat master_ = MasterFormat::kFp32;
  MomentFormat moments_ = MomentFormat::kFp32;
  DType compute_ = DType::kF32;
  const OptimizerRule* rule_ = &RuleOf(OptimizerKind::kAdam);
};

}  // namespace strata
