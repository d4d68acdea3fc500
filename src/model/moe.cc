// Mixture-of-experts MLP (moe.h).
#include "src/model/moe.h"

#include <string>

#include "src/model/expert_routing.h"
#include "src/model/model_family.h"
#include "src/model/router_loss.h"

namespace strata::model::detail {

Expert::Expert(const ModelConfig& c, bool mixtral_names) {
  const int64_t C = c.d_model, F = c.moe.expert_ffn;
  // Registered in execution order: gate, up, down.
  gate_ = register_module(mixtral_names ? "w1" : "gate_proj", std::make_shared<Linear>(C, F, false, c.init_std));
  up_ = register_module(mixtral_names ? "w3" : "up_proj", std::make_shared<Linear>(C, F, false, c.init_std));
  down_ = register_module(mixtral_names ? "w2" : "down_proj", std::make_shared<Linear>(F, C, false, c.init_std));
}

torch::Tensor Expert::Forward(const torch::Tensor& x, const ExpertAdapters& lora, int64_t e,
                              const BlockContext& ctx) const {
  torch::Tensor gate = gate_->Forward(x, ctx), up = up_->Forward(x, ctx);
  if (lora.gate_up) lora.gate_up->AddTo(x, {&gate, &up}, ctx, e);
  const torch::Tensor h = torch::silu(gate) * up;
  torch::Tensor y = down_->Forward(h, ctx);
  if (lora.down) lora.down->AddTo(h, {&y}, ctx, e);
  return y;
}

MoeMlp::MoeMlp(const ModelConfig& c)
    : top_k_(c.moe.top_k), renormalise_(c.moe.norm_topk_prob || FamilyOf(c).mixtral_experts) {
  gate_ = register_module("gate", std::make_shared<Linear>(c.d_model, c.moe.num_experts, false, c.init_std));
  auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t e = 0; e < c.moe.num_experts; ++e)
    experts_.push_back(experts->register_module(std::to_string(e), std::make_shared<Expert>(c, FamilyOf(c).mixtral_experts)));
  // After the experts, gate_up before down: the adapters' order in the block's layout.
  const Adapter adapter = c.lora.enabled() ? Adapter{c.lora.r, c.lora.scale(), 0} : Adapter{};
  const int64_t E = c.moe.num_experts, C = c.d_model, F = c.moe.expert_ffn;
  if (adapter.r > 0 && c.lora.TargetsExperts("gate_up_proj"))
    lora_.gate_up = experts->register_module("gate_up_proj", std::make_shared<StackedAdapter>(E, C, 2 * F, adapter));
  if (adapter.r > 0 && c.lora.TargetsExperts("down_proj"))
    lora_.down = experts->register_module("down_proj", std::make_shared<StackedAdapter>(E, F, C, adapter));
}

torch::Tensor MoeMlp::Forward(const torch::Tensor& x, const BlockContext& ctx) {
  const torch::Tensor tokens = x.reshape({-1, x.size(-1)});
  const torch::Tensor probs = torch::softmax(gate_->Forward(tokens, ctx), -1, torch::kFloat32);
  auto [weights, chosen] = probs.topk(top_k_, -1);
  if (renormalise_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  torch::Tensor out = torch::zeros_like(tokens);
  // Which (token, slot) chose each expert: one host read of the routing for the whole layer.
  const torch::Tensor order = chosen.reshape({-1}).argsort(/*stable=*/true).cpu();
  const torch::Tensor counts = torch::bincount(chosen.reshape({-1}).cpu(), {}, static_cast<int64_t>(experts_.size()));
  const int64_t* count = counts.data_ptr<int64_t>();
  if (ctx.routing) ctx.routing->Routed({count, experts_.size()});  // Note [Expert-aware fetching]
  int64_t at = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (count[e] == 0) continue;  // unchosen: runs nothing (and gets no gradient)
    const torch::Tensor flat = order.narrow(0, at, count[e]).to(x.device());
    at += count[e];
    const torch::Tensor token = flat.div(top_k_, "floor"), slot = flat.remainder(top_k_);
    const torch::Tensor y = experts_[e]->Forward(tokens.index_select(0, token), lora_, static_cast<int64_t>(e), ctx) *
                            weights.index({token, slot}).unsqueeze(-1);
    out.index_add_(0, token, y);
  }
  out = out.view(x.sizes());
  if (ctx.router_loss) out = ctx.router_loss->Record(out, probs, chosen);  // Note [Router loss]
  return out;
}

}  // namespace strata::model::detail
