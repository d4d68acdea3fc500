// A model's shape without LibTorch: the architecture config, its validation, and the
// arithmetic of its blocks ([embedding, layer 0 .. layer L-1, head]: how many, how many
// parameters each, which weight the head borrows, FLOPs per token). The estimator, the
// shard plan and the config tools use this; the blocks themselves are in model.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

// Block `index` of a config: 0 = embedding, 1..n_layer = layers, n_layer+1 = head.
inline BlockKind KindOf(const ModelConfig& config, int index) {
  if (index == 0) return BlockKind::kEmbedding;
  return index <= config.n_layer ? BlockKind::kLayer : BlockKind::kHead;
}

// The MLP width after defaults: GPT-2 4*C; LLaMA 8/3*C rounded up to a multiple of 64.
int64_t FfnHidden(const ModelConfig& config);

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

}  // namespace strata::model
