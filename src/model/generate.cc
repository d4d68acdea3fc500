// Incremental decoding and sampling (generate.h).
#include "src/model/generate.h"

#include <algorithm>

#include "strata/check.h"

namespace strata::model {

Decoder::Decoder(FullModel& model) : model_(model), caches_(model.blocks().size()) {}

torch::Tensor Decoder::Feed(const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  torch::Tensor x = tokens;
  for (size_t b = 0; b < model_.blocks().size(); ++b) x = model_.blocks()[b]->ForwardCached(x, position_, caches_[b]);
  position_ += tokens.size(1);
  return x;
}

torch::Tensor SamplingDistribution(const torch::Tensor& logits, const SamplingOptions& o) {
  STRATA_CHECK(o.temperature > 0) << "temperature " << o.temperature;
  // Shifted by the largest logit first, so that a tiny temperature gives the greedy choice
  // rather than inf / inf = NaN (softmax is unchanged by the shift).
  const torch::Tensor l = logits.to(torch::kFloat32);
  torch::Tensor probs = torch::softmax((l - l.max()) / o.temperature, -1);
  if (o.top_p >= 1) return probs;
  auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
  // A token stays if the more likely ones before it have not yet reached top_p: the most
  // likely token always stays.
  torch::Tensor before = sorted.cumsum(-1) - sorted;
  torch::Tensor kept_sorted = torch::where(before < o.top_p, sorted, torch::zeros_like(sorted));
  torch::Tensor kept = torch::zeros_like(probs).scatter(-1, order, kept_sorted);
  return kept / kept.sum();
}

int64_t NextToken(const torch::Tensor& logits, const SamplingOptions& o, at::Generator& gen) {
  if (!torch::isfinite(logits).all().item<bool>()) return -1;  // NaN or Inf weights: nothing to choose from
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  return torch::multinomial(SamplingDistribution(logits, o), 1, /*replacement=*/false, gen).item<int64_t>();
}

GenerateResult Generate(FullModel& model, int64_t max_positions, const std::vector<int64_t>& prompt,
                        int64_t max_new_tokens, const SamplingOptions& options, at::Generator& gen,
                        const std::function<void(int64_t)>& on_token, const std::vector<int64_t>& stop_tokens) {
  STRATA_CHECK(!prompt.empty()) << "empty prompt";
  STRATA_CHECK(static_cast<int64_t>(prompt.size()) <= max_positions)
      << "prompt of " << prompt.size() << " tokens exceeds the model's " << max_positions << " positions";
  GenerateResult result;
  Decoder decoder(model);
  torch::Tensor next = torch::tensor(prompt, torch::kLong).unsqueeze(0);
  while (static_cast<int64_t>(result.tokens.size()) < max_new_tokens) {
    if (decoder.position() + next.size(1) > max_positions) {
      result.reached_max_positions = true;
      break;
    }
    torch::Tensor logits = decoder.Feed(next);  // [1, T, V]
    const int64_t token = NextToken(logits[0][-1], options, gen);
    if (token < 0) {
      result.nonfinite_logits = true;
      break;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) {
      result.reached_stop_token = true;
      break;
    }
    next = torch::tensor({token}, torch::kLong).unsqueeze(0);
  }
  return result;
}

}  // namespace strata::model
