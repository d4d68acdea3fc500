#include "src/hf/hf_loader.h"

#include <algorithm>
#include <filesystem>

#include "src/base/input_file.h"
#include "src/base/durable_file.h"
#include "src/hf/hf_index.h"
#include "src/model/hf_names.h"
#include "src/checkpoint/safetensors.h"
#include "src/config/json_reader.h"

namespace strata::ckpt {

using model::CanonicalHfName;
using model::FusedRows;
using model::FusedRowsOf;
using model::HfName;
using model::IsHfBuffer;
using model::ToHfName;
namespace fs = std::filesystem;
namespace {

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

constexpr const char* kIndexName = "model.safetensors.index.json";

// The first entries of a long list of problems, one a line, and how many more: a config that
// does not match its weights (4096 experts on 4) must not bury the reason in 12,000 lines.
std::string FirstFew(const std::vector<std::string>& problems) {
  constexpr size_t kShown = 8;
  std::string text = ":";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) text += "\n  " + problems[i];
  if (problems.size() > kShown) text += fmt::format("\n  ... and {} more", problems.size() - kShown);
  return text;
}

}  // namespace

StatusOr<std::shared_ptr<HfWeights>> HfWeights::Open(const std::string& path, const model::ModelConfig& config) {
  std::shared_ptr<HfWeights> w(new HfWeights(path, config));
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    STRATA_RETURN_IF_ERROR(w->OpenFolder());
  } else {
    STRATA_RETURN_IF_ERROR(w->AddFile(path, nullptr));
  }
  return w;
}

// The index's weight_map (tensor -> shard file), each shard's header checked against it;
// without an index, the folder's single model.safetensors.
Status HfWeights::OpenFolder() {
  const std::string index = (fs::path(path_) / kIndexName).string();
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    const std::string single = (fs::path(path_) / "model.safetensors").string();
    if (!fs::exists(single, ec))
      return Error(StatusCode::kNotFound, "'{}' holds neither {} nor model.safetensors", path_, kIndexName);
    return AddFile(single, nullptr);
  }
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadInputFile(index, kMaxIndexFileBytes, "a safetensors index"));
  STRATA_ASSIGN_OR_RETURN(auto by_file, ParseSafetensorsIndex(text, "'" + index + "'"));
  for (const auto& [file, names] : by_file) STRATA_RETURN_IF_ERROR(AddFile((fs::path(path_) / file).string(), &names));
  return Status();
}

// Records the tensors of one file (header only; the mapping is dropped again). `expected`:
// the names the index places in it, each of which must be there.
Status HfWeights::AddFile(const std::string& file, const std::set<std::string>* expected) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(file));
  const int id = static_cast<int>(files_.size());
  files_.push_back(file);
  const bool gpt2 = config_.arch == model::Arch::kGpt2;
  for (const TensorView& t : f.tensors()) {
    Entry e{t.name, id, t.dtype, t.shape, f.FileOffset(t), t.bytes.size()};
    const std::string key = CanonicalHfName(gpt2, t.name);
    if (auto [it, fresh] = by_canonical_.emplace(key, e); !fresh)
      return InvalidArgument("tensor '{}' is in both '{}' and '{}'", t.name, FileName(it->second.file), FileName(id));
  }
  if (expected)
    for (const std::string& name : *expected)
      if (!f.Find(name))
        return Error(StatusCode::kDataLoss, "'{}' places tensor '{}' in '{}', which does not hold it",
                     (fs::path(path_) / kIndexName).string(), name, file);
  return Status();
}

std::string HfWeights::FileName(int file) const {
  return files_.size() == 1 && files_[0] == path_ ? path_ : fs::path(files_[file]).filename().string();
}

Status HfWeights::FillBlock(int block, std::vector<std::pair<std::string, torch::Tensor>>& params) {
  const bool gpt2 = config_.arch == model::Arch::kGpt2;
  std::vector<std::string> problems;
  std::map<int, MappedFile> mapped;  // this block's shards, unmapped on return
  for (auto& [name, tensor] : params) {
    const HfName hf = ToHfName(gpt2, static_cast<int>(config_.n_layer), block, name);
    // A fused projection (Phi-3's qkv_proj, gate_up_proj): these rows of it.
    const std::optional<FusedRows> fused = FusedRowsOf(config_, hf.name);
    const std::string stored = fused ? fused->fused : hf.name;
    auto it = by_canonical_.find(stored);
    if (it == by_canonical_.end()) {
      problems.push_back(fmt::format("missing tensor '{}' (Strata block {} '{}', shape {})", stored, block, name,
                                     Shape(tensor.sizes().vec())));
      continue;
    }
    const Entry& t = it->second;
    std::vector<int64_t> want = tensor.sizes().vec();
    if (hf.transpose) std::swap(want[0], want[1]);
    if (fused) want[0] = fused->total_rows;
    if (t.shape != want) {
      problems.push_back(fmt::format("'{}' has shape {}, the model config needs {}{} (in '{}')", t.name, Shape(t.shape),
                                     Shape(want), hf.transpose ? " (HF Conv1D layout [in, out])" : "", FileName(t.file)));
      continue;
    }
    torch::ScalarType st;
    if (t.dtype == "F32") st = torch::kFloat32;
    else if (t.dtype == "BF16") st = torch::kBFloat16;
    else if (t.dtype == "F16") st = torch::kFloat16;
    else {
      problems.push_back(fmt::format("'{}' has dtype {}; F32, BF16 or F16 expected (in '{}')", t.name, t.dtype,
                                     FileName(t.file)));
      continue;
    }
    if (!mapped.count(t.file)) {
      STRATA_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(files_[t.file]));
      if (m.bytes().size() < t.offset + t.bytes)
        return Error(StatusCode::kDataLoss, "'{}' shrank since it was opened", files_[t.file]);
      mapped.emplace(t.file, std::move(m));
    }
    const std::byte* data = mapped.at(t.file).bytes().data() + t.offset;
    torch::Tensor src = torch::from_blob(const_cast<std::byte*>(data), t.shape, torch::TensorOptions().dtype(st));
    if (hf.transpose) src = src.t();
    if (fused) src = src.narrow(0, fused->begin, fused->rows);
    tensor.copy_(src.to(torch::kFloat32));
    if (const int64_t bad = (~torch::isfinite(tensor)).sum().item<int64_t>(); bad > 0) {
      problems.push_back(fmt::format("'{}' holds {} NaN or Inf value(s) of {}: training from it would change nothing "
                                     "(in '{}')", t.name, bad, tensor.numel(), FileName(t.file)));
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    used_.insert(stored);
  }
  if (problems.empty()) return Status();
  const auto missing = std::count_if(problems.begin(), problems.end(),
                                     [](const std::string& p) { return p.starts_with("missing tensor"); });
  std::string msg = fmt::format("'{}' does not match the model (strata.model) in block {}: {} problem(s){}", path(),
                                block, problems.size(), missing > 0 ? fmt::format(", {} missing tensor(s)", missing) : "");
  return Status(StatusCode::kInvalidArgument, msg + FirstFew(problems));
}

Status HfWeights::CheckAllUsed() const {
  std::vector<std::string> extra;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, e] : by_canonical_) {
      if (used_.count(name) || IsHfBuffer(name)) continue;
      if (name == "lm_head.weight" && config_.tie_embeddings) continue;  // HF may keep the tied copy
      extra.push_back(fmt::format("'{}' {} in '{}'", e.name, Shape(e.shape), FileName(e.file)));
    }
  }
  if (extra.empty()) return Status();
  std::string msg = fmt::format("'{}' holds {} tensor(s) that the model (strata.model: {} layers, {}) does not have",
                                path(), extra.size(), config_.n_layer,
                                config_.tie_embeddings ? "tied embeddings" : "untied LM head");
  return Status(StatusCode::kInvalidArgument, msg + FirstFew(extra));
}

EngineHooks MakeInitFromHooks(std::shared_ptr<HfWeights> weights, int num_blocks) {
  EngineHooks h;
  h.init_weights = [weights, num_blocks](int block, std::vector<std::pair<std::string, torch::Tensor>>& params) {
    STRATA_RETURN_IF_ERROR(weights->FillBlock(block, params));
    if (block == num_blocks - 1) return weights->CheckAllUsed();
    return Status();
  };
  return h;
}

Status LoadIntoModel(HfWeights& weights, model::FullModel& model) {
  const auto& blocks = model.blocks();
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& item : blocks[b]->named_parameters(true)) params.push_back({item.key(), item.value().detach()});
    STRATA_RETURN_IF_ERROR(weights.FillBlock(static_cast<int>(b), params));
  }
  return weights.CheckAllUsed();
}

model::ModelConfig ModelOf(const Consolidator& c) {
  model::ModelConfig m = c.model();
  m.lora = model::LoraConfig{};  // merged into the base
  return m;
}

Status LoadCheckpointIntoModel(const Consolidator& c, model::FullModel& model) {
  const model::ModelConfig& config = c.model();
  const bool gpt2 = config.arch == model::Arch::kGpt2;
  const auto& blocks = model.blocks();
  if (static_cast<int>(blocks.size()) != c.num_blocks())
    return InvalidArgument("'{}' holds {} blocks, the model {}", c.step_dir(), c.num_blocks(), blocks.size());
  torch::NoGradGuard no_grad;
  for (int b = 0; b < c.num_blocks(); ++b) {
    STRATA_ASSIGN_OR_RETURN(std::vector<ExportedTensor> tensors, c.Block(b, ExportDType::kF32));
    std::map<std::string, const ExportedTensor*> by_name;
    for (const ExportedTensor& t : tensors) by_name[t.view.name] = &t;
    for (const auto& item : blocks[b]->named_parameters(true)) {
      const HfName hf = ToHfName(gpt2, static_cast<int>(config.n_layer), b, item.key());
      auto it = by_name.find(hf.name);
      std::vector<int64_t> want = item.value().sizes().vec();
      if (hf.transpose) std::swap(want[0], want[1]);
      if (it == by_name.end() || it->second->view.shape != want)
        return Error(StatusCode::kDataLoss, "'{}': block {} has no tensor '{}' of shape {}", c.step_dir(), b, hf.name,
                     Shape(want));
      torch::Tensor src = torch::from_blob(const_cast<std::byte*>(it->second->view.bytes.data()), want,
                                           torch::TensorOptions().dtype(torch::kFloat32));
      item.value().detach().copy_(hf.transpose ? src.t() : src);
    }
  }
  return Status();
}

}  // namespace strata::ckpt
