#include "src/engine/state_format.h"

#include "src/engine/update/mode_facts.h"

#include <cstring>

#include <fmt/format.h>

#include "strata/cast.h"
#include "strata/check.h"

namespace strata {
namespace {

bool IsMoment(TensorRole r) { return r == TensorRole::kAdamM || r == TensorRole::kAdamV; }

template <typename T>
std::span<T> As(std::span<std::byte> b) {
  return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(T)};
}

}  // namespace

// Whether the fp32 master is stored as the working weights themselves, once: fp32 compute
// (where they are the same numbers), an update that replaces them in one place (optimizer_overlap
// "none" or "forward": the speculative and delayed updates keep two versions), no LoRA (the
// base has no master), strata.resident_blocks 0 or "auto" and no block's working weights on the
// device. Saves 4 B/param of state and of every update's writes; bitwise the same run.
static bool MasterInWorking(const TrainConfig& c, bool any_resident) {
  return c.compute_dtype == DType::kF32 && !c.split_master && !c.model.lora.enabled() && c.resident_blocks <= 0 &&
         !any_resident && FactsOf(c).one_version;
}

StateFormat StateFormat::Of(const TrainConfig& cfg, bool any_resident) {
  StateFormat f;
  f.rule_ = &RuleOf(cfg.optimizer);
  f.compute_ = cfg.compute_dtype;
  f.moments_ = cfg.moments_8bit ? MomentFormat::k8Bit
               : cfg.adam_states == DType::kBF16 ? MomentFormat::kBf16
                                                 : MomentFormat::kFp32;
  f.master_ = cfg.split_master                           ? MasterFormat::kSplit
              : MasterInWorking(cfg, any_resident)       ? MasterFormat::kInWorking
                                                         : MasterFormat::kFp32;
  return f;
}

Status StateFormat::Check(const TrainConfig& c, bool any_resident) {
  const OptimizerRule& rule = RuleOf(c.optimizer);
  if (!rule.compact_moments && (c.moments_8bit || c.adam_states != DType::kF32))
    return InvalidArgument("strata.adam_states \"{}\": {} keeps its state in fp32 only (bf16 and 8-bit states are "
                           "Adam's); leave strata.adam_states out or \"fp32\"", c.moments_8bit ? "8bit" : "bf16",
                           rule.title);
  if (!c.split_master) return Status();
  if (c.compute_dtype != DType::kBF16)
    return InvalidArgument("strata.master_weights \"split\": needs bf16 compute (this run computes in {}: {}); the "
                           "working weights are the master's high halves", DTypeName(c.compute_dtype),
                           c.precision_reason.empty() ? "bf16.enabled" : c.precision_reason);
  if (any_resident)
    return InvalidArgument("strata.master_weights \"split\": this run keeps blocks' working weights on the device "
                           "(zero_optimization.offload_param.device \"none\", or strata.resident_blocks), where the "
                           "CPU update cannot read them; offload them to \"cpu\" or \"nvme\"");
  return Status();
}

const char* StateFormat::MomentsName() const {
  return moments_ == MomentFormat::k8Bit ? "8bit" : moments_ == MomentFormat::kBf16 ? "bf16" : "fp32";
}

const char* StateFormat::MasterDescription() const {
  return master_ == MasterFormat::kSplit       ? "master low halves (split)"
         : master_ == MasterFormat::kInWorking ? "fp32 master (= working)"
                                               : "fp32 master weights";
}

DType StateFormat::VisitedDType(TensorRole role) const {
  if (role == TensorRole::kWorking || role == TensorRole::kAdapter) return compute_;
  return role == TensorRole::kMaster ? DType::kF32 : VisitedMomentDType();
}

size_t StateFormat::VisitedBytes(TensorRole role) const { return DTypeSize(VisitedDType(role)); }

bool StateFormat::Stores(TensorRole role) const {
  if (role == TensorRole::kMaster) return MasterStored();
  return IsMoment(role) && rule_->Keeps(role);
}

bool StateFormat::StoresState(int k) const {
  return Stores(kStateRoles[k]);
}

const char* StateFormat::RowName(TensorRole role) const {
  if (role == TensorRole::kMaster) return MasterDescription();
  return role == TensorRole::kAdamM ? rule_->m_row : rule_->v_row;
}

uint64_t StateFormat::StoredBytes(TensorRole role, int64_t len) const {
  const uint64_t n = static_cast<uint64_t>(len);
  if (IsMoment(role) && !rule_->Keeps(role)) return 0;
  if (IsMoment(role) && moments_ == MomentFormat::k8Bit) return Moment8BitBytes(n);
  if (role == TensorRole::kMaster)
    return master_ == MasterFormat::kSplit ? n * 2 : master_ == MasterFormat::kInWorking ? 0 : n * 4;
  return n * VisitedBytes(role);
}

uint64_t StateFormat::StoredStateBytes(int k, int64_t len) const {
  return StoredBytes(kStateRoles[k], len);
}

uint64_t StateFormat::BackupBytes(int64_t len) const {
  return static_cast<uint64_t>(len) * (4 + rule_->moments() * DTypeSize(VisitedMomentDType()) + working_bytes());
}

bool StateFormat::SplitInPlace(float* values, int64_t len, uint16_t* working_out) const {
  if (master_ != MasterFormat::kSplit) return false;
  SplitMasterWeightsInPlace(values, static_cast<size_t>(len), working_out);
  return true;
}

std::span<const std::byte> StateFormat::InitialMaster(const float* flat, ElementRange working, ElementRange sub) const {
  switch (master_) {
    case MasterFormat::kInWorking: return {};
    case MasterFormat::kFp32: return {reinterpret_cast<const std::byte*>(flat + sub.begin), static_cast<size_t>(sub.len) * 4};
    case MasterFormat::kSplit: {  // the low halves, written over the working range by SplitInPlace
      STRATA_CHECK(sub.begin >= working.begin && sub.end() <= working.end()) << "a split master outside the working range";
      const auto* low = reinterpret_cast<const int16_t*>(flat + working.begin) + (sub.begin - working.begin);
      return {reinterpret_cast<const std::byte*>(low), static_cast<size_t>(sub.len) * 2};
    }
  }
  return {};
}

AdamSpans StateFormat::UpdateSpans(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len,
                                   std::span<const float> grad, std::span<const uint16_t> grad_bf16, uint64_t seed,
                                   int64_t step, int block, int64_t first) const {
  AdamSpans spans;
  const size_t n = static_cast<size_t>(len);
  if (master_ == MasterFormat::kSplit) spans.master_low = As<int16_t>(states[0]);  // the high halves: `out`
  else if (master_ == MasterFormat::kInWorking) spans.params = {reinterpret_cast<float*>(out), n};
  else spans.params = As<float>(states[0]);
  if (moments_ == MomentFormat::kFp32) {  // (a slot the optimizer does not keep: empty)
    spans.exp_avg = As<float>(states[1]);
    spans.exp_avg_sq = As<float>(states[2]);
  } else {
    if (moments_ == MomentFormat::k8Bit) {
      spans.exp_avg_8bit = As<uint8_t>(states[1]);
      spans.exp_avg_sq_8bit = As<uint8_t>(states[2]);
    } else {
      spans.exp_avg_bf16 = As<uint16_t>(states[1]);
      spans.exp_avg_sq_bf16 = As<uint16_t>(states[2]);
    }
    // Stochastic rounding's bits from what the update is, never from who runs it: the run's
    // seed, Adam's step, the block and the flat-group position (global, not rank-relative).
    // So ranks, stages, sub-groups, overlap modes, a speculative redo and a resume all give
    // the same bits (Note [Stochastic rounding of the moments]).
    spans.rounding_seed = MixRoundingSeed(MixRoundingSeed(seed, static_cast<uint64_t>(step)), block);
    spans.rounding_index = static_cast<uint64_t>(first);
  }
  spans.grad = grad;
  spans.grad_bf16 = grad_bf16;
  if (compute_ != DType::kF32) {
    spans.half_out = std::span<uint16_t>(reinterpret_cast<uint16_t*>(out), n);
    spans.half_format = compute_ == DType::kBF16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
  }
  return spans;
}

void StateFormat::FinishUpdate(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len) const {
  if (compute_ == DType::kF32 && master_ == MasterFormat::kFp32) std::memcpy(out, states[0].data(), len * 4);
}

void StateFormat::KeepWeights(const std::array<std::span<std::byte>, 3>& states, std::byte* out, int64_t len) const {
  if (master_ != MasterFormat::kFp32) return;  // in the working weights, or their high halves
  const std::span<const float> master = As<float>(states[0]).first(static_cast<size_t>(len));
  if (compute_ == DType::kF32) {
    std::memcpy(out, master.data(), len * 4);
  } else if (compute_ == DType::kBF16) {
    CastFp32ToBf16(master, {reinterpret_cast<uint16_t*>(out), master.size()});
  } else {
    auto* half = reinterpret_cast<uint16_t*>(out);
    for (size_t i = 0; i < master.size(); ++i) half[i] = Fp32ToFp16(master[i]);
  }
}

void StateFormat::ReadMaster(std::span<const std::byte> working, std::span<const std::byte> stored,
                             std::span<float> dst) const {
  const size_t n = dst.size();
  switch (master_) {
    case MasterFormat::kFp32: std::memcpy(dst.data(), stored.data(), n * 4); return;
    case MasterFormat::kInWorking: std::memcpy(dst.data(), working.data(), n * 4); return;
    case MasterFormat::kSplit:
      JoinMasterWeights({reinterpret_cast<const uint16_t*>(working.data()), n},
                        {reinterpret_cast<const int16_t*>(stored.data()), n}, dst);
      return;
  }
}

void StateFormat::WriteMaster(std::span<const float> fp32, std::span<std::byte> working,
                              std::span<std::byte> stored) const {
  const size_t n = fp32.size();
  switch (master_) {
    case MasterFormat::kFp32: std::memcpy(stored.data(), fp32.data(), n * 4); return;
    case MasterFormat::kInWorking: std::memcpy(working.data(), fp32.data(), n * 4); return;
    case MasterFormat::kSplit: {
      // The working weights are what the master rounds to (a checkpoint written with an fp32
      // master holds those already; this keeps the pair consistent whatever it holds).
      SplitMasterWeights(fp32, {reinterpret_cast<uint16_t*>(working.data()), n},
                         {reinterpret_cast<int16_t*>(stored.data()), n});
      return;
    }
  }
}

bool StateFormat::Converts(TensorRole role) const { return IsMoment(role) && moments_ == MomentFormat::k8Bit; }

std::vector<std::byte> StateFormat::Visit(TensorRole role, std::span<const std::byte> stored, int64_t len) const {
  if (!Converts(role)) return {stored.begin(), stored.end()};
  std::vector<std::byte> out(static_cast<size_t>(len) * 4);
  DecodeMoment8Bit(role == TensorRole::kAdamV, {reinterpret_cast<const uint8_t*>(stored.data()), stored.size()},
                   As<float>(std::span(out)));
  return out;
}

std::vector<std::byte> StateFormat::Restore(TensorRole role, std::span<const std::byte> visited, int64_t len) const {
  if (!Converts(role)) return {visited.begin(), visited.end()};
  std::vector<std::byte> blob(StoredBytes(role, len));
  EncodeMoment8BitNearest(role == TensorRole::kAdamV, {reinterpret_cast<const float*>(visited.data()), visited.size() / 4},
                          As<uint8_t>(std::span(blob)));
  return blob;
}

Status StateFormat::CheckResume(const std::string& saved, const std::string& where) const {
  if (saved == DTypeName(VisitedMomentDType())) return Status();
  return Error(StatusCode::kFailedPrecondition, "'{}' holds Adam m and v in {}; this run has strata.adam_states \"{}\" "
               "(set it to match to resume{})", where, saved, MomentsName(),
               moments_ == MomentFormat::k8Bit ? ", or to \"8bit\" from fp32 ones" : "");
}

std::string StateFormat::ResumeNote(const std::string& saved_run) const {
  const bool eight = moments_ == MomentFormat::k8Bit;
  if (saved_run.empty() || saved_run == MomentsName() || (saved_run != "8bit" && !eight)) return "";
  return fmt::format("was written by a run whose Adam m and v were {}; this run keeps them {} (strata.adam_states)",
                     saved_run == "8bit" ? "8-bit (it holds their fp32 values)" : saved_run,
                     eight ? "in 8 bits, from those fp32 values" : "in fp32 from here on");
}

}  // namespace strata
