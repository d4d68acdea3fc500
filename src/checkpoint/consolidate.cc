#include "src/checkpoint/consolidate.h"

#include <cmath>
#include <cstring>

#include "src/checkpoint/hf_names.h"
#include "src/checkpoint/manifest.h"
#include "src/engine/shard_plan.h"
#include "src/engine/train_config.h"
#include "strata/cast.h"

namespace strata::ckpt {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// One parameter of block b out of its consolidated fp32 flat group: checked for coverage,
// renamed to Hugging Face's name (transposed where HF keeps [in, out]) and converted.
StatusOr<ExportedTensor> ExportParameter(const nlohmann::json& p, const std::vector<float>& flat,
                                         const std::vector<char>& seen, int b, bool gpt2, int n_layer,
                                         ExportDType dtype, const std::string& step_dir) {
  const std::string name = p.at("name").get<std::string>();
  const auto shape = p.at("shape").get<std::vector<int64_t>>();
  const int64_t off = p.at("offset").get<int64_t>();
  const int64_t numel = Numel(shape);
  if (off < 0 || off + numel > static_cast<int64_t>(flat.size()))
    return Error(StatusCode::kDataLoss, "'{}': parameter '{}' of block {} lies outside its flat group", step_dir, name, b);
  for (int64_t i = off; i < off + numel; ++i)
    if (!seen[i])
      return Error(StatusCode::kDataLoss, "'{}': no rank file holds element {} of block {} ('{}')", step_dir, i, b, name);
  const HfName hf = ToHfName(gpt2, n_layer, b, name);
  std::vector<int64_t> out_shape = shape;
  std::vector<float> vals(flat.begin() + off, flat.begin() + off + numel);
  if (hf.transpose) {  // [out, in] -> [in, out]
    const int64_t rows = shape[0], cols = shape[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) vals[c * rows + r] = flat[off + r * cols + c];
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
                     "--dtype fp32 or bf16", step_dir, hf.name, i, vals[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  t.view = {hf.name, SafetensorsDTypeName(dtype), out_shape, {}};
  return t;
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
  return c;
}

std::vector<PlannedTensor> Consolidator::Plan(ExportDType dtype) const {
  const bool gpt2 = model_.arch == model::Arch::kGpt2;
  const uint64_t elem = dtype == ExportDType::kF32 ? 4 : 2;
  std::vector<PlannedTensor> out;
  for (const nlohmann::json& blk : manifest_["layout"])
    for (const nlohmann::json& p : blk.at("params")) {
      const HfName hf = ToHfName(gpt2, static_cast<int>(model_.n_layer), blk.at("block").get<int>(),
                                 p.at("name").get<std::string>());
      auto shape = p.at("shape").get<std::vector<int64_t>>();
      if (hf.transpose) std::swap(shape[0], shape[1]);
      out.push_back({hf.name, shape, elem * static_cast<uint64_t>(Numel(shape))});
    }
  return out;
}

// Per block: the fp32 master shards ("block<b>.<offset>.master") at their flat offsets.
StatusOr<std::vector<ExportedTensor>> Consolidator::Block(int i, ExportDType dtype) const {
  const nlohmann::json& blk = manifest_["layout"][i];
  const int b = blk.at("block").get<int>();
  const int64_t padded = blk.at("padded").get<int64_t>();
  std::vector<float> flat(padded, 0.f);
  std::vector<char> seen(padded, 0);
  for (const SafetensorsFile& f : files_)
    for (const TensorView& t : f.tensors()) {
      const std::optional<TensorKey> key = TensorKey::Parse(t.name);
      if (!key || key->block != b || key->role != TensorRole::kMaster) continue;
      const int64_t off = key->offset;
      const int64_t n = t.numel();
      if (t.dtype != "F32" || off < 0 || off + n > padded)
        return Error(StatusCode::kDataLoss, "'{}': tensor '{}' ({} x {}) lies outside block {} ({} elements)", f.path(),
                     t.name, n, t.dtype, b, padded);
      std::memcpy(flat.data() + off, t.bytes.data(), n * 4);
      std::memset(seen.data() + off, 1, n);
    }
  std::vector<ExportedTensor> out;
  for (const nlohmann::json& p : blk.at("params")) {
    STRATA_ASSIGN_OR_RETURN(ExportedTensor t, ExportParameter(p, flat, seen, b, model_.arch == model::Arch::kGpt2,
                                                              static_cast<int>(model_.n_layer), dtype, step_dir_));
    out.push_back(std::move(t));
  }
  for (ExportedTensor& t : out) t.view.bytes = t.bytes;  // after the moves: the vectors' storage is stable
  return out;
}

}  // namespace strata::ckpt
