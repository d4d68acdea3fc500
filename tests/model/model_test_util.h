// The small model config and token batches the model tests share.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include "src/model/model.h"

namespace strata::model::testing {

inline ModelConfig Tiny(Arch arch, bool tie = true, uint64_t seed = 7) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.seq_len = 16;
  c.n_layer = 2;
  c.d_model = 32;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::kLlama ? 2 : 0;
  c.tie_embeddings = tie;
  c.seed = seed;
  return c;
}

// A [B, T] batch of token ids below V, the same for the same seed.
inline torch::Tensor Tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(V, {B, T}, gen, torch::kInt64);
}

// ||got - want|| / ||want|| in float64 (||got - want|| where want is all zeros).
inline double NormRelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.to(torch::kFloat64).norm().item<double>();
  const double diff = (got.to(torch::kFloat64) - want.to(torch::kFloat64)).norm().item<double>();
  return scale == 0 ? diff : diff / scale;
}

}  // namespace strata::model::testing
