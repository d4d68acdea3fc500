#include "src/checkpoint/hf_loader.h"

#include "src/checkpoint/hf_names.h"

namespace strata::ckpt {
namespace {

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

StatusOr<std::shared_ptr<HfWeights>> HfWeights::Open(const std::string& path, const model::ModelConfig& config) {
  STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  std::shared_ptr<HfWeights> w(new HfWeights(std::move(f), config));
  const bool gpt2 = config.arch == model::Arch::kGpt2;
  for (const TensorView& t : w->file_.tensors()) w->by_canonical_[CanonicalHfName(gpt2, t.name)] = &t;
  return w;
}

Status HfWeights::FillBlock(int block, std::vector<std::pair<std::string, torch::Tensor>>& params) {
  const bool gpt2 = config_.arch == model::Arch::kGpt2;
  std::vector<std::string> problems;
  for (auto& [name, tensor] : params) {
    const HfName hf = ToHfName(gpt2, static_cast<int>(config_.n_layer), block, name);
    auto it = by_canonical_.find(hf.name);
    if (it == by_canonical_.end()) {
      problems.push_back(fmt::format("missing tensor '{}' (Strata block {} '{}', shape {})", hf.name, block, name,
                                     Shape(tensor.sizes().vec())));
      continue;
    }
    const TensorView& t = *it->second;
    std::vector<int64_t> want = tensor.sizes().vec();
    if (hf.transpose) std::swap(want[0], want[1]);
    if (t.shape != want) {
      problems.push_back(fmt::format("'{}' has shape {}, the model config needs {}{}", t.name, Shape(t.shape),
                                     Shape(want), hf.transpose ? " (HF Conv1D layout [in, out])" : ""));
      continue;
    }
    torch::ScalarType st;
    if (t.dtype == "F32") st = torch::kFloat32;
    else if (t.dtype == "BF16") st = torch::kBFloat16;
    else if (t.dtype == "F16") st = torch::kFloat16;
    else {
      problems.push_back(fmt::format("'{}' has dtype {}; F32, BF16 or F16 expected", t.name, t.dtype));
      continue;
    }
    torch::Tensor src = torch::from_blob(const_cast<std::byte*>(t.bytes.data()), t.shape, torch::TensorOptions().dtype(st));
    if (hf.transpose) src = src.t();
    tensor.copy_(src.to(torch::kFloat32));
    if (const int64_t bad = (~torch::isfinite(tensor)).sum().item<int64_t>(); bad > 0) {
      problems.push_back(fmt::format("'{}' holds {} NaN or Inf value(s) of {}: training from it would change nothing",
                                     t.name, bad, tensor.numel()));
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    used_.insert(hf.name);
  }
  if (problems.empty()) return Status();
  std::string msg = fmt::format("'{}' does not match the model (strata.model) in block {}:", path(), block);
  for (const auto& p : problems) msg += "\n  " + p;
  return Status(StatusCode::kInvalidArgument, msg);
}

Status HfWeights::CheckAllUsed() const {
  std::vector<std::string> extra;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, view] : by_canonical_) {
      if (used_.count(name) || IsHfBuffer(name)) continue;
      if (name == "lm_head.weight" && config_.tie_embeddings) continue;  // HF may keep the tied copy
      extra.push_back(fmt::format("'{}' {}", view->name, Shape(view->shape)));
    }
  }
  if (extra.empty()) return Status();
  std::string msg = fmt::format("'{}' holds {} tensor(s) that the model (strata.model: {} layers, {}) does not have:",
                                path(), extra.size(), config_.n_layer,
                                config_.tie_embeddings ? "tied embeddings" : "untied LM head");
  for (size_t i = 0; i < extra.size() && i < 20; ++i) msg += "\n  " + extra[i];
  if (extra.size() > 20) msg += fmt::format("\n  ... and {} more", extra.size() - 20);
  return Status(StatusCode::kInvalidArgument, msg);
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

}  // namespace strata::ckpt
