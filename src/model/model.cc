// The block factory, the loss, and FullModel, the reference that composes all blocks into
// one module. The arithmetic of blocks is in model_config.cc.
#include <torch/nn/functional/loss.h>

#include <optional>
#include <string>

#include "src/model/blocks.h"
#include "src/model/layers.h"
#include "src/model/model_family.h"
#include "strata/check.h"

namespace strata::model {

std::shared_ptr<Block> MakeBlock(const ModelSpec& spec, int index, const torch::Tensor& storage) {
  STRATA_CHECK(index >= 0 && index < spec.num_blocks()) << "block " << index << " of " << spec.num_blocks();
  std::optional<detail::ParameterArena> arena;
  if (storage.defined()) {
    STRATA_CHECK(storage.scalar_type() == torch::kFloat32 && storage.is_contiguous() && storage.is_cpu())
        << "block storage must be a contiguous fp32 CPU tensor";
    // With LoRA the adapters follow the base parameters (Note [Block parameters]).
    const int64_t base = spec.config().lora.enabled() ? spec.block_parameters(index) - spec.trainable_parameters(index)
                                                      : storage.numel();
    arena.emplace(storage, base);
  }
  detail::ParameterArena*& current = detail::ParameterArena::Current();
  current = arena ? &*arena : nullptr;
  struct Reset {
    detail::ParameterArena*& current;
    ~Reset() { current = nullptr; }
  } reset{current};
  switch (FamilyOf(spec.config()).blocks) {  // Note [Model families]
    case Blocks::kGpt2: return detail::MakeGpt2Block(spec.config(), index);
    case Blocks::kGemma: return detail::MakeGemmaBlock(spec.config(), index);
    case Blocks::kLlama: break;
  }
  return detail::MakeLlamaBlock(spec.config(), index);
}


torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  STRATA_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
               logits.size(1) == targets.size(1))
      << "logits " << logits.sizes() << " targets " << targets.sizes();
  const int64_t V = logits.size(2);
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32).reshape({-1, V}), targets.reshape({-1}));
}

torch::Tensor MaskedLanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                      const torch::Tensor& mask) {
  STRATA_CHECK(logits.dim() == 3 && logits.sizes().slice(0, 2) == targets.sizes() && mask.sizes() == targets.sizes() &&
               mask.scalar_type() == torch::kBool)
      << "logits " << logits.sizes() << " mask " << mask.sizes() << " " << mask.scalar_type() << " targets "
      << targets.sizes();
  // Masked targets become cross_entropy's ignore_index (its default, so an all-true mask
  // makes exactly LanguageModelLoss's call); the mean is then over the others.
  constexpr int64_t kIgnore = -100;
  namespace F = torch::nn::functional;
  auto options = F::CrossEntropyFuncOptions().ignore_index(kIgnore);
  if (!mask.any().item<bool>()) options.reduction(torch::kSum);  // an empty sum: 0, gradient 0
  const int64_t V = logits.size(2);
  return F::cross_entropy(logits.to(torch::kFloat32).reshape({-1, V}),
                          targets.masked_fill(mask.logical_not(), kIgnore).reshape({-1}), options);
}

FullModel::FullModel(const ModelSpec& spec) {
  for (int i = 0; i < spec.num_blocks(); ++i) {
    blocks_.push_back(register_module(std::to_string(i), MakeBlock(spec, i)));
  }
  if (std::optional<Tie> tie = spec.tie()) {
    // One parameter, used twice: autograd sums the gradients of both uses into it.
    auto owned = blocks_[tie->owner_block]->named_parameters();
    const torch::Tensor* weight = owned.find(tie->owner_param);
    STRATA_CHECK(weight != nullptr) << "tie owner has no parameter " << tie->owner_param;
    blocks_[tie->user_block]->BindTiedWeight(*weight);
  }
}

torch::Tensor FullModel::Forward(const torch::Tensor& tokens, const BlockContext& ctx) {
  torch::Tensor x = tokens;
  for (const auto& block : blocks_) x = block->Forward(x, ctx);
  return x;
}

}  // namespace strata::model
