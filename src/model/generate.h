// Text continuation with a trained model (`strata generate`): incremental decoding with a
// key/value cache per layer, and greedy, temperature and top-p (nucleus) sampling. The whole
// model is a FullModel in host memory: this is for looking at small fine-tunes, not serving.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "src/model/model.h"

namespace strata::model {

// Feeds one sequence (batch 1) through a FullModel a chunk at a time, each chunk attending
// to the keys/values its predecessors left in the cache.
class Decoder {
 public:
  explicit Decoder(FullModel& model);
  // Logits [1, T, V] of `tokens` [1, T], which continue the tokens fed before.
  torch::Tensor Feed(const torch::Tensor& tokens);
  int64_t position() const { return position_; }  // tokens fed so far

 private:
  FullModel& model_;
  std::vector<KvCache> caches_;  // one per block; only layers use theirs
  int64_t position_ = 0;
};

struct SamplingOptions {
  double temperature = 0;  // 0: greedy (argmax)
  double top_p = 1;        // keep the smallest set of most likely tokens whose probability reaches top_p
};

// The distribution the next token is drawn from (fp32 [V]): softmax(logits / temperature),
// zero outside the nucleus, renormalised. Needs temperature > 0.
torch::Tensor SamplingDistribution(const torch::Tensor& logits, const SamplingOptions& options);

// The next token from `logits` [V]: the argmax at temperature 0 (the first on ties, as
// torch.argmax), else a draw from SamplingDistribution with `gen`; -1 when the logits are
// not all finite (there is no distribution to draw from).
int64_t NextToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& gen);

struct GenerateResult {
  std::vector<int64_t> tokens;  // the new ones, without the prompt
  bool reached_max_positions = false;  // stopped at the model's sequence length
  bool reached_stop_token = false;     // the last token is one of the stop tokens
  bool nonfinite_logits = false;       // stopped: the logits held NaN or Inf (the weights do)
};

// Continues `prompt` (not empty) by up to `max_new_tokens`, stopping earlier when the
// sequence reaches `max_positions` (GPT-2's position table / the config's seq_len) or right
// after a token of `stop_tokens` (the model's end-of-sequence ids; it is kept, as
// transformers keeps it). `on_token` sees each new token as soon as it is chosen.
GenerateResult Generate(FullModel& model, int64_t max_positions, const std::vector<int64_t>& prompt,
                        int64_t max_new_tokens, const SamplingOptions& options, at::Generator& gen,
                        const std::function<void(int64_t)>& on_token = {},
                        const std::vector<int64_t>& stop_tokens = {});

}  // namespace strata::model
