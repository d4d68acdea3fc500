#include "src/checkpoint/export.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "src/checkpoint/hf_names.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"
#include "src/engine/shard_plan.h"
#include "strata/cast.h"

namespace strata::ckpt {

namespace {

struct ExportedTensor {
  TensorView view;  // name, dtype and shape; bytes are attached by the caller
  std::vector<std::byte> bytes;
  int64_t numel = 0;
};

// One parameter of block b out of its consolidated fp32 flat group: checked for coverage,
// renamed to Hugging Face's name (transposed where HF keeps [in, out]) and converted.
StatusOr<ExportedTensor> ExportParameter(const nlohmann::json& p, const std::vector<float>& flat,
                                         const std::vector<char>& seen, int b, bool gpt2, int n_layer,
                                         ExportDType dtype, const std::string& step_dir) {
  const std::string name = p.at("name").get<std::string>();
  const auto shape = p.at("shape").get<std::vector<int64_t>>();
  const int64_t off = p.at("offset").get<int64_t>();
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
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
  t.view = {hf.name, dtype == ExportDType::kF32 ? "F32" : dtype == ExportDType::kBF16 ? "BF16" : "F16", out_shape, {}};
  return t;
}

StatusOr<ExportReport> Export(const std::string& checkpoint, const std::string& out, ExportDType dtype) {
  ExportReport rep;
  STRATA_ASSIGN_OR_RETURN(rep.step_dir, ResolveStepDir(checkpoint));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json m, ReadManifest(rep.step_dir));
  const int world = m["world_size"].get<int>();
  std::vector<SafetensorsFile> files;
  for (int r = 0; r < world; ++r) {
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, OpenRankFile(rep.step_dir, m, r));
    files.push_back(std::move(f));
  }
  rep.step = m["step"].get<int64_t>();
  const bool gpt2 = m["model"].at("arch") == "gpt2";
  const int n_layer = m["model"].at("n_layer").get<int>();

  // Per block: the fp32 master shards ("block<b>.<offset>.master") at their flat offsets.
  std::vector<std::vector<std::byte>> data;  // one buffer per output tensor
  std::vector<TensorView> views;
  for (const nlohmann::json& blk : m["layout"]) {
    const int b = blk.at("block").get<int>();
    const int64_t padded = blk.at("padded").get<int64_t>();
    std::vector<float> flat(padded, 0.f);
    std::vector<char> seen(padded, 0);
    for (const SafetensorsFile& f : files)
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
    for (const nlohmann::json& p : blk.at("params")) {
      STRATA_ASSIGN_OR_RETURN(ExportedTensor t, ExportParameter(p, flat, seen, b, gpt2, n_layer, dtype, rep.step_dir));
      rep.parameters += t.numel;
      data.push_back(std::move(t.bytes));
      views.push_back(std::move(t.view));
    }
  }
  for (size_t i = 0; i < views.size(); ++i) views[i].bytes = data[i];
  rep.tensors = static_cast<int64_t>(views.size());
  const std::string tmp = out + ".tmp";
  STRATA_RETURN_IF_ERROR(WriteSafetensors(tmp, views, {{"format", "pt"}}, &rep.bytes));
  if (::rename(tmp.c_str(), out.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", tmp, out);
  const std::string parent = std::filesystem::path(out).parent_path().string();
  STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  return rep;
}

}  // namespace

StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype) {
  try {  // ReadManifest checks what export reads; a model section is read by key here
    return Export(checkpoint, out, dtype);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", checkpoint, e.what());
  }
}

}  // namespace strata::ckpt
