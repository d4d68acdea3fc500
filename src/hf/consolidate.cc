#include "src/hf/consolidate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/model/hf_names.h"
#include "src/model/nf4_blob.h"
#include "src/hf/lora_export.h"
#include "src/checkpoint/manifest.h"
#include "src/engine/shard_plan.h"
#include "src/config/train_config.h"
#include "strata/cast.h"

namespace strata::ckpt {

using model::CanonicalHfName;
using model::HfName;
using model::IsHfBuffer;
using model::ToHfName;
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Widens `n` working-weight elements (F32, BF16 or F16) into `out`.
bool Widen(const TensorView& t, int64_t n, float* out) {
  if (t.dtype == "F32") {
    std::memcpy(out, t.bytes.data(), n * 4);
    return true;
  }
  if (t.dtype != "BF16" && t.dtype != "F16") return false;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, t.bytes.data() + 2 * i, 2);
    out[i] = t.dtype == "BF16" ? Bf16ToFp32(h) : Fp16ToFp32(h);
  }
  return true;
}

}  // namespace

const char* SafetensorsDTypeName(ExportDType dtype) {
  return dtype == ExportDType::kF32 ? "F32" : dtype == ExportDType::kBF16 ? "BF16" : "F16";
}

StatusOr<Consolidator> Consolidator::Open(const std::string& checkpoint) {
  Consolidator c;
  STRATA_ASSIGN_OR_RETURN(c.step_dir_, ResolveStepDir(checkpoint));
  STRATA_ASSIGN_OR_RETURN(c.manifest_, ReadManifest(c.step_dir_));
  STRATA_ASSIGN_OR_RETURN(c.model_, ParseModelConfigJson(c.manifest_["model"], "'" + c.step_dir_ + "/manifest.json'"));
  const int world = c.manifest_["world_size"].get<int>();
  for (int r = 0; r < world; ++r) {
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, OpenRankFile(c.step_dir_, c.manifest_, r));
    c.files_.push_back(std::move(f));
  }
  if (c.lora()) {  // the base is in the working weights: where each rank's lie (ShardPlan's rule)
    SettledConfig cfg;  // (the layout is the written config's)
    cfg.model = c.model_;
    cfg.zero_stage = c.manifest_.at("zero_stage").get<int>();
    cfg.sub_group_size = c.manifest_.at("sub_group_size").get<int64_t>();
    const std::string compute = c.manifest_.at("compute_dtype").get<std::string>();  // NF4 blobs' element size
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
      if (compute == DTypeName(t)) cfg.compute_dtype = t;
    const ModelShape shape = ModelShape::Of(c.model_);
    for (int r = 0; r < world; ++r) {
      const ShardPlan plan = ShardPlan::Make(cfg, shape, world, r);
      if (plan.blocks.size() != c.manifest_["layout"].size())
        return Error(StatusCode::kDataLoss, "'{}/manifest.json': its layout has {} blocks, its model {}", c.step_dir_,
                     c.manifest_["layout"].size(), plan.blocks.size());
      std::vector<ElementRange> ranges;
      for (const BlockPlan& b : plan.blocks) ranges.push_back(b.working);
      c.working_.push_back(std::move(ranges));
    }
  }
  return c;
}

std::vector<PlannedTensor> Consolidator::Plan(ExportDType dtype) const {
  const bool gpt2 = model_.arch == model::Arch::kGpt2;
  const uint64_t elem = dtype == ExportDType::kF32 ? 4 : 2;
  std::vector<PlannedTensor> out;
  for (const nlohmann::json& blk : manifest_["layout"])
    for (const nlohmann::json& p : blk.at("params")) {
      if (lora() && IsAdapterName(p.at("name").get<std::string>())) continue;  // merged
      const HfName hf = ToHfName(gpt2, static_cast<int>(model_.n_layer), blk.at("block").get<int>(),
                                 p.at("name").get<std::string>());
      auto shape = p.at("shape").get<std::vector<int64_t>>();
      if (hf.transpose) std::swap(shape[0], shape[1]);
      out.push_back({hf.name, shape, elem * static_cast<uint64_t>(Numel(shape))});
    }
  return out;
}

// The masters ("block<b>.<offset>.master", fp32) at their flat offsets.
StatusOr<FlatBlock> Consolidator::Flat(int i, bool with_base) const {
  const nlohmann::json& blk = manifest_["layout"][i];
  const int b = blk.at("block").get<int>();
  const int64_t padded = blk.at("padded").get<int64_t>();
  FlatBlock flat;
  flat.block = b;
  flat.values.assign(padded, 0.f);
  flat.seen.assign(padded, 0);
  flat.keep_raw = model_.lora.nf4_base();
  if (with_base && lora()) STRATA_RETURN_IF_ERROR(ReadWorking(&flat));
  for (const SafetensorsFile& f : files_)
    for (const TensorView& t : f.tensors()) {
      const std::optional<TensorKey> key = TensorKey::Parse(t.name);
      if (!key || key->block != b || key->role != TensorRole::kMaster) continue;
      const int64_t off = key->offset;
      const int64_t n = t.numel();
      if (t.dtype != "F32" || off < 0 || off + n > padded)
        return Error(StatusCode::kDataLoss, "'{}': tensor '{}' ({} x {}) lies outside block {} ({} elements)", f.path(),
                     t.name, n, t.dtype, b, padded);
      std::memcpy(flat.values.data() + off, t.bytes.data(), n * 4);
      std::memset(flat.seen.data() + off, 1, n);
    }
  return flat;
}

// "block<b>.working" starts the rank's working range; with the base on NVMe it stops where
// "block<b>.adapter" (the range's trainable end) starts: the tensors' sizes say where.
Status Consolidator::ReadWorking(FlatBlock* flat) const {
  const int b = flat->block;
  const int64_t padded = static_cast<int64_t>(flat->values.size());
  for (size_t r = 0; r < files_.size(); ++r) {
    const ElementRange w = working_[r].at(b);
    if (w.end() > padded)
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {} has {} elements, its model's working range "
                   "ends at {}", step_dir_, b, padded, w.end());
    for (const auto& [role, at_end] : {std::pair{"working", false}, std::pair{"adapter", true}}) {
      const std::string name = fmt::format("block{}.{}", b, role);
      const TensorView* t = files_[r].Find(name);
      if (!t) continue;
      const int64_t n = t->numel();
      const int64_t at = at_end ? w.end() - n : w.begin;
      if (n > w.len || !Widen(*t, n, flat->values.data() + at))
        return Error(StatusCode::kDataLoss, "'{}': tensor '{}' ({} x {}) does not fit the working range [{}, {}) of "
                     "block {}", files_[r].path(), name, n, t->dtype, w.begin, w.end(), b);
      std::memset(flat->seen.data() + at, 1, n);
      if (flat->keep_raw) {  // NF4 blobs are bytes, not values
        flat->esize = static_cast<int64_t>(t->bytes.size()) / n;
        flat->raw.resize(padded * flat->esize);
        std::memcpy(flat->raw.data() + at * flat->esize, t->bytes.data(), t->bytes.size());
      }
    }
  }
  return Status();
}

// A QLoRA block (Note [NF4 base]): its NF4 weights' blobs decoded, and every parameter laid
// end to end at new offsets, as the model computes with them.
Status Consolidator::ExpandNf4(FlatBlock* flat, nlohmann::json* params) const {
  FlatBlock out;
  out.block = flat->block;
  for (nlohmann::json& p : *params) {
    const int64_t off = p.at("offset").get<int64_t>(), numel = Numel(p.at("shape").get<std::vector<int64_t>>());
    const int64_t stored = p.value("nf4_stored", int64_t{0});
    const int64_t len = stored > 0 ? stored : numel, at = static_cast<int64_t>(out.values.size());
    if (off < 0 || off + len > static_cast<int64_t>(flat->values.size()) ||
        (stored > 0 && (flat->esize == 0 || model::Nf4BlobBytes(numel) > stored * flat->esize)))
      return Error(StatusCode::kDataLoss, "'{}': parameter '{}' of block {} lies outside its flat group", step_dir_,
                   p.at("name").get<std::string>(), flat->block);
    out.values.resize(at + numel);
    out.seen.resize(at + numel);
    if (stored > 0) {
      const bool seen = std::all_of(flat->seen.begin() + off, flat->seen.begin() + off + stored, [](char c) { return c; });
      model::DecodeNf4Blob(std::span(flat->raw).subspan(off * flat->esize, stored * flat->esize), numel,
                           out.values.data() + at);
      std::fill(out.seen.begin() + at, out.seen.end(), seen);
      p.erase("nf4_stored");
    } else {
      std::copy_n(flat->values.begin() + off, numel, out.values.begin() + at);
      std::copy_n(flat->seen.begin() + off, numel, out.seen.begin() + at);
    }
    p["offset"] = at;
  }
  *flat = std::move(out);
  return Status();
}

StatusOr<ExportedTensor> Consolidator::Extract(const FlatBlock& flat, const nlohmann::json& p, const std::string& name,
                                               bool transpose, ExportDType dtype) const {
  const std::string param = p.at("name").get<std::string>();
  const auto shape = p.at("shape").get<std::vector<int64_t>>();
  const int64_t off = p.at("offset").get<int64_t>();
  const int64_t numel = Numel(shape);
  const int b = flat.block;
  if (off < 0 || off + numel > static_cast<int64_t>(flat.values.size()))
    return Error(StatusCode::kDataLoss, "'{}': parameter '{}' of block {} lies outside its flat group", step_dir_, param, b);
  for (int64_t i = off; i < off + numel; ++i)
    if (!flat.seen[i])
      return Error(StatusCode::kDataLoss, "'{}': no rank file holds element {} of block {} ('{}')", step_dir_, i, b, param);
  std::vector<int64_t> out_shape = shape;
  const float* src = flat.values.data() + off;
  std::vector<float> vals(src, src + numel);
  if (transpose) {  // [out, in] -> [in, out]
    const int64_t rows = shape[0], cols = shape[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) vals[c * rows + r] = src[r * cols + c];
    out_shape = {cols, rows};
  }
  ExportedTensor t;
  t.numel = numel;
  if (dtype == ExportDType::kF32) {
    t.bytes.resize(numel * 4);
    std::memcpy(t.bytes.data(), vals.data(), t.bytes.size());
  } else {
    t.bytes.resize(numel * 2);
    for (int64_t i = 0; i < numel; ++i) {
      const uint16_t h = dtype == ExportDType::kBF16 ? Fp32ToBf16(vals[i]) : Fp32ToFp16(vals[i]);
      if (dtype == ExportDType::kF16 && (h & 0x7c00u) == 0x7c00u && std::isfinite(vals[i]))
        return Error(StatusCode::kOutOfRange, "'{}': {} element {} is {}, beyond fp16's range (65504); export "
                     "--dtype fp32 or bf16", step_dir_, name, i, vals[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  t.view = {name, SafetensorsDTypeName(dtype), out_shape, {}};
  t.view.bytes = t.bytes;  // a moved vector keeps its storage, so the view stays valid
  return t;
}

StatusOr<std::vector<ExportedTensor>> Consolidator::Block(int i, ExportDType dtype) const {
  const nlohmann::json& blk = manifest_["layout"][i];
  STRATA_ASSIGN_OR_RETURN(FlatBlock flat, Flat(i, /*with_base=*/true));
  nlohmann::json params = blk.at("params");
  if (model_.lora.nf4_base()) STRATA_RETURN_IF_ERROR(ExpandNf4(&flat, &params));
  if (lora()) STRATA_RETURN_IF_ERROR(MergeAdapters(params, model_.lora.scale(), step_dir_, &flat));
  const bool gpt2 = model_.arch == model::Arch::kGpt2;
  std::vector<ExportedTensor> out;
  for (const nlohmann::json& p : params) {
    const std::string name = p.at("name").get<std::string>();
    if (lora() && IsAdapterName(name)) continue;
    const HfName hf = ToHfName(gpt2, static_cast<int>(model_.n_layer), flat.block, name);
    STRATA_ASSIGN_OR_RETURN(ExportedTensor t, Extract(flat, p, hf.name, hf.transpose, dtype));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace strata::ckpt
