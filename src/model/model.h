// Models as an ordered list of blocks: [embedding, layer 0 .. layer L-1, head]. A block is
// the unit of execution, of activation checkpointing and of sharding (one flat group per
// block). Blocks are created one at a time, each initialised deterministically from
// (seed, block index), so a rank can materialise and shard a model larger than its memory
// block by block, and every rank count and every plain-LibTorch reference gets the same
// initial weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata::model {

enum class Arch { kGpt2, kLlama };

struct ModelConfig {
  Arch arch = Arch::kGpt2;
  int64_t vocab_size = 256;  // the byte tokenizer's
  int64_t seq_len = 128;     // max positions (GPT-2's learned position table size)
  int64_t n_layer = 2;
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;     // LLaMA grouped-query attention; 0 = n_head
  int64_t ffn_hidden = 0;    // 0 = GPT-2: 4*d_model; LLaMA: 8/3*d_model rounded up to a multiple of 64
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double init_std = 0.02;
  uint64_t seed = 1234;
};

// Checks sizes (positive, d_model divisible by n_head, n_head divisible by n_kv_head, even
// head dim for RoPE); the error names the field and the allowed range.
Status Validate(const ModelConfig& config);

enum class BlockKind { kEmbedding, kLayer, kHead };

class Block : public torch::nn::Module {
 public:
  virtual BlockKind kind() const = 0;
  // kEmbedding: int64 tokens [B, T] -> hidden [B, T, C]
  // kLayer:     hidden [B, T, C] -> hidden [B, T, C] (causal self-attention + MLP, pre-norm)
  // kHead:      hidden [B, T, C] -> logits [B, T, V] (final norm + LM head)
  // Computes in the dtype of its parameters (the caller casts); the input hidden state
  // has that dtype too.
  virtual torch::Tensor Forward(const torch::Tensor& input) = 0;
  // kHead with tied embeddings: the embedding's token table [V, C] that the head multiplies
  // with. The caller binds it before Forward; the head holds no copy of its own.
  virtual void BindTiedWeight(const torch::Tensor& weight) {}
};

// The head (user) reuses the owner's parameter named owner_param.
struct Tie {
  int owner_block = 0;
  std::string owner_param;  // e.g. "wte.weight"
  int user_block = 0;
};

class ModelSpec {
 public:
  explicit ModelSpec(ModelConfig config);  // config must pass Validate() (STRATA_CHECKed)
  const ModelConfig& config() const { return config_; }
  int num_blocks() const;  // n_layer + 2
  // Block `index`, fp32 parameters on the CPU, initialised from (seed, index) only.
  std::shared_ptr<Block> MakeBlock(int index) const;
  std::optional<Tie> tie() const;
  int64_t block_parameters(int index) const;  // elements in that block's own parameters
  int64_t num_parameters() const;             // all blocks (a tied weight counted once)
  // Training FLOPs per token: 6 * parameters (embedding tables excluded; the LM head's
  // [V, C] matmul counted, tied or not) + attention 12 * n_layer * d_model * seq_len
  // (forward + backward, no recomputation).
  double train_flops_per_token() const;

 private:
  ModelConfig config_;
};

// Mean cross-entropy over all B*T positions, computed in fp32 whatever the logits' dtype.
torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets);

// The whole model as one module (all blocks, tie applied as one shared parameter): the
// plain-LibTorch reference that tests and bench compare the engine with.
class FullModel : public torch::nn::Module {
 public:
  explicit FullModel(const ModelSpec& spec);
  torch::Tensor Forward(const torch::Tensor& tokens);  // logits
  const std::vector<std::shared_ptr<Block>>& blocks() const { return blocks_; }

 private:
  std::vector<std::shared_ptr<Block>> blocks_;
};

}  // namespace strata::model
