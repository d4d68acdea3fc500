// The bytes of the blocks' group collectives in one rank's step (tensor parallelism, Note
// [Tensor parallel]; Ulysses, Note [Ulysses]): what each rank puts into them, by kind, and
// what it then receives over either transport. The arithmetic the fake device's count of the
// engine's calls is checked against (tests/engine/model_parallel_engine_test.cc).
#pragma once

#include "src/config/train_config.h"

namespace strata {

struct GroupTraffic {
  int tensor = 1, sequence = 1;  // the groups' sizes
  // Per rank and step, bytes of: all-reduces over the tensor group (a sublayer's output in the
  // forward, its input's gradient in the backward; with the vocabulary-split loss, each token's
  // target logit and the head input's gradient); all-gathers over it (each token's share of the
  // log-sum-exp); all-to-alls over the sequence group (q, k, v to heads and the attention back,
  // each way), counted as each rank's whole send buffer.
  double summed = 0, gathered = 0, exchanged = 0;

  bool any() const { return summed + gathered + exchanged > 0; }
  // Bytes one rank receives in a step. `host_ring`: the group communicators over the world's
  // ring (Note [Process mesh]: every call one all-gather over all `world` ranks); else NCCL's
  // ring all-reduce and all-gather and direct sends inside each group.
  double Received(bool host_ring, int world) const;
};

// The language-model objective's step (Note [DPO]'s pairs are not counted).
GroupTraffic EstimateGroupTraffic(const SettledConfig& cfg);

}  // namespace strata
