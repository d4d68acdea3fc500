// ModelConfig validation and the arithmetic of blocks (model_config.h), without LibTorch.
#include "src/model/model_config.h"

#include "strata/check.h"

namespace strata::model {
namespace {

Status Positive(const char* field, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgument("model config: {} = {} must be positive", field, value);
}

int64_t KvHeads(const ModelConfig& c) { return c.n_kv_head > 0 ? c.n_kv_head : c.n_head; }

// Elements in the block's own parameters (a tied head has no lm_head); the blocks' layouts
// are documented in gpt2.cc and llama.cc, which register exactly these.
int64_t Gpt2BlockParameters(const ModelConfig& c, int index) {
  const int64_t C = c.d_model, V = c.vocab_size, F = FfnHidden(c);
  switch (KindOf(c, index)) {
    case BlockKind::kEmbedding: return V * C + c.seq_len * C;
    case BlockKind::kLayer: return 2 * (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
    case BlockKind::kHead: return 2 * C + (c.tie_embeddings ? 0 : V * C);
  }
  return 0;
}

int64_t LlamaBlockParameters(const ModelConfig& c, int index) {
  const int64_t C = c.d_model, V = c.vocab_size, F = FfnHidden(c);
  const int64_t q_out = C, kv_out = KvHeads(c) * (C / c.n_head);
  switch (KindOf(c, index)) {
    case BlockKind::kEmbedding: return V * C;
    case BlockKind::kLayer: return 2 * C + C * q_out + 2 * C * kv_out + q_out * C + 3 * C * F;
    case BlockKind::kHead: return C + (c.tie_embeddings ? 0 : V * C);
  }
  return 0;
}

}  // namespace

Status Validate(const ModelConfig& c) {
  STRATA_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  STRATA_RETURN_IF_ERROR(Positive("seq_len", c.seq_len));
  STRATA_RETURN_IF_ERROR(Positive("n_layer", c.n_layer));
  STRATA_RETURN_IF_ERROR(Positive("d_model", c.d_model));
  STRATA_RETURN_IF_ERROR(Positive("n_head", c.n_head));
  if (c.d_model % c.n_head != 0) {
    return InvalidArgument("model config: n_head = {} must divide d_model = {}", c.n_head, c.d_model);
  }
  if (c.n_kv_head < 0 || c.n_kv_head > c.n_head || (c.n_kv_head > 0 && c.n_head % c.n_kv_head != 0)) {
    return InvalidArgument("model config: n_kv_head = {} must be 0 (= n_head) or a divisor of n_head = {}",
                           c.n_kv_head, c.n_head);
  }
  if (c.arch == Arch::kGpt2 && c.n_kv_head != 0 && c.n_kv_head != c.n_head) {
    return InvalidArgument("model config: n_kv_head = {} is LLaMA's grouped-query attention; GPT-2 needs 0 or n_head = {}",
                           c.n_kv_head, c.n_head);
  }
  if (c.arch == Arch::kLlama && (c.d_model / c.n_head) % 2 != 0) {
    return InvalidArgument("model config: d_model / n_head = {} must be even for RoPE", c.d_model / c.n_head);
  }
  if (c.ffn_hidden < 0) return InvalidArgument("model config: ffn_hidden = {} must be >= 0 (0 = default)", c.ffn_hidden);
  if (!(c.norm_eps > 0)) return InvalidArgument("model config: norm_eps = {} must be positive", c.norm_eps);
  if (!(c.rope_theta > 0)) return InvalidArgument("model config: rope_theta = {} must be positive", c.rope_theta);
  if (!(c.init_std >= 0)) return InvalidArgument("model config: init_std = {} must be >= 0", c.init_std);
  return Status::Ok();
}

int64_t FfnHidden(const ModelConfig& c) {
  if (c.ffn_hidden > 0) return c.ffn_hidden;
  if (c.arch == Arch::kGpt2) return 4 * c.d_model;
  const int64_t third = (8 * c.d_model + 2) / 3;  // ceil(8C / 3)
  return (third + 63) / 64 * 64;
}

ModelSpec::ModelSpec(ModelConfig config) : config_(std::move(config)) {
  Status s = Validate(config_);
  STRATA_CHECK(s.ok()) << "ModelSpec needs a config that passed Validate(): " << s.ToString();
}

int ModelSpec::num_blocks() const { return static_cast<int>(config_.n_layer) + 2; }

std::optional<Tie> ModelSpec::tie() const {
  if (!config_.tie_embeddings) return std::nullopt;
  return Tie{0, "wte.weight", num_blocks() - 1};
}

int64_t ModelSpec::block_parameters(int index) const {
  STRATA_CHECK(index >= 0 && index < num_blocks()) << "block " << index << " of " << num_blocks();
  return config_.arch == Arch::kGpt2 ? Gpt2BlockParameters(config_, index) : LlamaBlockParameters(config_, index);
}

int64_t ModelSpec::num_parameters() const {
  int64_t total = 0;
  for (int i = 0; i < num_blocks(); ++i) total += block_parameters(i);
  return total;
}

// The embedding tables are lookups, not matmuls, so they are left out; the LM head's
// [V, C] matmul is counted whether its weight is its own or the tied table.
double ModelSpec::train_flops_per_token() const {
  const ModelConfig& c = config_;
  double matmul_params = 0;
  for (int i = 1; i < num_blocks(); ++i) matmul_params += static_cast<double>(block_parameters(i));
  if (c.tie_embeddings) matmul_params += static_cast<double>(c.vocab_size) * static_cast<double>(c.d_model);
  return 6.0 * matmul_params + 12.0 * static_cast<double>(c.n_layer * c.d_model * c.seq_len);
}

}  // namespace strata::model
