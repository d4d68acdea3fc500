// Folder-private: the sparse MLP of a mixture-of-experts layer (MoeOptions in model_config.h).
#pragma once

#include <memory>
#include <vector>

#include "src/model/layers.h"

namespace strata::model::detail {

// One SwiGLU expert: down(silu(gate(x)) * up(x)), under its family's names (Qwen3-MoE and
// OLMoE: gate_proj, up_proj, down_proj; Mixtral: w1, w3, w2).
class Expert final : public torch::nn::Module {
 public:
  Expert(const ModelConfig& c, bool mixtral_names);
  torch::Tensor Forward(const torch::Tensor& x) const;

 private:
  std::shared_ptr<Linear> gate_, up_, down_;
};

// The router ("gate", [E, C]) and the experts ("experts.<j>"): each token's output is the sum,
// in expert order, of its top_k experts' outputs weighted by the router's fp32 softmax
// probabilities (renormalised over the chosen with norm_topk_prob), cast to the compute dtype
// as transformers does. Only the experts some token chose run.
class MoeMlp final : public FeedForward {
 public:
  explicit MoeMlp(const ModelConfig& c);
  torch::Tensor Forward(const torch::Tensor& x) override;

 private:
  std::shared_ptr<Linear> gate_;
  std::vector<std::shared_ptr<Expert>> experts_;
  int64_t top_k_;
  bool renormalise_;
};

}  // namespace strata::model::detail
