// Models as an ordered list of blocks: [embedding, layer 0 .. layer L-1, head]. A block is
// the unit of execution, of activation checkpointing and of sharding (one flat group per
// block). Blocks are created one at a time, each initialised deterministically from
// (seed, block index), so a rank can materialise and shard a model larger than its memory
// block by block, and every rank count and every plain-LibTorch reference gets the same
// initial weights.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "src/model/block_context.h"
#include "src/model/model_config.h"
#include "strata/check.h"
#include "strata/status.h"

namespace strata::model {

// One layer's keys and values for incremental decoding (generate.h): [B, Hkv, past, D], keys
// after RoPE; undefined before the layer's first ForwardCached.
struct KvCache {
  torch::Tensor k, v;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

class Block : public torch::nn::Module {
 public:
  virtual BlockKind kind() const = 0;
  // kEmbedding: int64 tokens [B, T] -> hidden [B, T, C]
  // kLayer:     hidden [B, T, C] -> hidden [B, T, C] (causal self-attention + MLP, pre-norm)
  // kHead:      hidden [B, T, C] -> logits [B, T, V] (final norm + LM head)
  // Computes in the dtype of its parameters (the caller casts); the input hidden state
  // has that dtype too. `ctx`: what the pass arms (packing, dropout, routing, tiles).
  virtual torch::Tensor Forward(const torch::Tensor& input, const BlockContext& ctx) = 0;
  // A plain pass: nothing armed.
  torch::Tensor Forward(const torch::Tensor& input) { return Forward(input, BlockContext{}); }
  // kHead with tied embeddings: the embedding's token table [V, C] that the head multiplies
  // with. The caller binds it before Forward; the head holds no copy of its own.
  virtual void BindTiedWeight(const torch::Tensor& weight) {}
  // kHead, for the tiled loss (tiled_loss.h): the final norm's output [B, T, C], and the
  // weight [V, C] the LM head multiplies it with (lm_head.weight, or the bound tied table).
  virtual torch::Tensor HeadHidden(const torch::Tensor& input) {
    STRATA_CHECK(false) << "HeadHidden on a block that is not a head";
    return {};
  }
  virtual torch::Tensor HeadWeight() const {
    STRATA_CHECK(false) << "HeadWeight on a block that is not a head";
    return {};
  }
  // kHead: the cap of the logits' soft-capping, cap * tanh(logits / cap), that Forward applies
  // and the tiled loss must too (Gemma 2); 0 = none.
  virtual double LogitSoftcap() const { return 0; }
  // Forward for positions past..past+T-1 of a sequence whose first `past` positions were fed
  // before: a layer attends to `cache` (its earlier keys/values) and appends its new ones.
  // Inference only; Forward (training) is untouched by it. The default serves blocks without
  // positions (the LLaMA embedding, heads); GPT-2's embedding and every layer override it.
  virtual torch::Tensor ForwardCached(const torch::Tensor& input, int64_t past, KvCache& cache) {
    STRATA_CHECK(kind() != BlockKind::kLayer) << "this layer has no ForwardCached";
    return Forward(input);
  }
};

// Block `index` of `spec`, fp32 parameters on the CPU, initialised from (seed, index) only;
// its parameters number spec.block_parameters(index). With `storage` (fp32, contiguous, at
// least that many elements) the parameters are consecutive ranges of it in named_parameters()
// order — the block's flat layout — so the engine initialises a block in place, in a buffer
// it reuses, instead of in fresh memory that it then copies (Note [Building blocks]).
std::shared_ptr<Block> MakeBlock(const ModelSpec& spec, int index, const torch::Tensor& storage = {});

// Mean cross-entropy over all B*T positions, computed in fp32 whatever the logits' dtype.
torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets);
// Mean cross-entropy over the positions where `mask` (bool [B, T]) is true, in fp32; the
// other positions contribute nothing, to the loss or to any gradient. With no position
// selected: 0, with zero gradients (not 0 / 0). With every position selected it is
// LanguageModelLoss, bitwise.
torch::Tensor MaskedLanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                      const torch::Tensor& mask);

// The whole model as one module (all blocks, tie applied as one shared parameter): the
// plain-LibTorch reference that tests and bench compare the engine with.
class FullModel : public torch::nn::Module {
 public:
  explicit FullModel(const ModelSpec& spec);
  torch::Tensor Forward(const torch::Tensor& tokens, const BlockContext& ctx = {});  // logits
  const std::vector<std::shared_ptr<Block>>& blocks() const { return blocks_; }

 private:
  std::vector<std::shared_ptr<Block>> blocks_;
};

}  // namespace strata::model
