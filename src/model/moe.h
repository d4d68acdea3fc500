// Folder-private: the sparse MLP of a mixture-of-experts layer (MoeOptions in model_config.h).
#pragma once

#include <memory>
#include <vector>

#include "src/model/layers.h"

namespace strata::model::detail {

// Note [Expert adapters]
// PEFT adapts transformers' fused expert tensors (gate_up_proj [E, 2F, C], down_proj [E, C, F];
// LoraConfig.target_parameters, its ParamWrapper) with one adapter per tensor: lora_A
// [r*E, in] and lora_B [out, r*E], expert e's delta weight being scale * B_e A_e with A_e the
// rows e*r .. e*r + r-1 of A (expert-major) and B_e the columns e, E + e, ..., (r-1)*E + e of B
// (rank-major). Strata keeps that layout, so the export copies the tensors and AdamW's
// moments cover the same elements as PEFT's: an expert no token chose gets zeros in its
// slices of the gradient and AdamW steps them (to PEFT the adapter is one parameter; an
// expert's own weights under full fine-tuning are skipped instead). gate_up's adapter feeds
// gate (its first F outputs) and up (the next F) from one x A_e^T. No dropout: PEFT cannot
// factor it out of the adapted weights and refuses it. (StackedAdapter in layers.h.)
// A sparse layer's expert adapters; null where not targeted.
struct ExpertAdapters {
  std::shared_ptr<StackedAdapter> gate_up, down;
};

// One SwiGLU expert: down(silu(gate(x)) * up(x)), under its family's names (Qwen3-MoE and
// OLMoE: gate_proj, up_proj, down_proj; Mixtral: w1, w3, w2), as expert `e` of `lora`'s.
class Expert final : public torch::nn::Module {
 public:
  Expert(const ModelConfig& c, bool mixtral_names);
  torch::Tensor Forward(const torch::Tensor& x, const ExpertAdapters& lora, int64_t e, const BlockContext& ctx) const;

 private:
  std::shared_ptr<Linear> gate_, up_, down_;
};

// The router ("gate", [E, C]) and the experts ("experts.<j>"): each token's output is the sum,
// in expert order, of its top_k experts' outputs weighted by the router's fp32 softmax
// probabilities (renormalised over the chosen with norm_topk_prob), cast to the compute dtype
// as transformers does. Only the experts some token chose run. With strata.lora's
// target_parameters the experts' adapters are "experts.gate_up_proj" and "experts.down_proj".
class MoeMlp final : public FeedForward {
 public:
  explicit MoeMlp(const ModelConfig& c);
  // `ctx`: whom the routing is reported to, and the load-balancing loss recorded in.
  torch::Tensor Forward(const torch::Tensor& x, const BlockContext& ctx) override;

 private:
  std::shared_ptr<Linear> gate_;
  std::vector<std::shared_ptr<Expert>> experts_;
  ExpertAdapters lora_;
  int64_t top_k_;
  bool renormalise_;
};

}  // namespace strata::model::detail
