// The small model config the model tests share.
#pragma once

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

}  // namespace strata::model::testing
