#include "src/estimate/group_traffic.h"

#include "src/model/model_config.h"

namespace strata {

double GroupTraffic::Received(bool host_ring, int world) const {
  if (host_ring) return static_cast<double>(world - 1) * (summed + gathered + exchanged);
  const double t = tensor, s = sequence;
  return 2.0 * (t - 1) / t * summed + (t - 1) * gathered + (s - 1) / s * exchanged;
}

GroupTraffic EstimateGroupTraffic(const SettledConfig& cfg) {
  GroupTraffic g;
  g.tensor = static_cast<int>(cfg.tensor_parallel);
  g.sequence = static_cast<int>(cfg.sequence_parallel);
  const model::ModelConfig m = model::Canonical(cfg.model);
  const double dsize = static_cast<double>(DTypeSize(cfg.compute_dtype));
  const double tokens = static_cast<double>(RankMicroBatchTokens(cfg)), micro_batches = static_cast<double>(cfg.grad_accum);
  const double layers = static_cast<double>(m.n_layer), d = static_cast<double>(m.d_model);
  // A layer's collectives run in each forward (twice with recompute) and once in the backward.
  const double passes = (cfg.keep_activations ? 1.0 : 2.0) + 1.0;
  if (g.tensor > 1) {
    g.summed = micro_batches * layers * 2.0 * passes * tokens * d * dsize;  // attention and MLP
    if (cfg.loss_chunk > 0) {  // the vocabulary-split loss (Note [Tiled loss]), once per micro-batch
      g.summed += micro_batches * tokens * (4.0 + d * dsize);
      g.gathered = micro_batches * tokens * 4.0;
    }
  }
  if (g.sequence > 1) {
    const double heads = static_cast<double>(m.n_head), kv = static_cast<double>(m.n_kv_head > 0 ? m.n_kv_head : m.n_head);
    const double per_layer = tokens * static_cast<double>(model::HeadDim(m)) * (2.0 * heads + 2.0 * kv) / g.tensor * dsize;
    g.exchanged = micro_batches * layers * passes * per_layer;
  }
  return g;
}

}  // namespace strata
