// strata.loss_chunk "auto": whether the head's loss is tiled, and how finely (Note [Tiled
// loss], src/model/tiled_loss.cc). The untiled head holds a micro-batch's fp32 logits, their
// softmax and their gradient; above 1 GiB of logits (8 K tokens at a 32 K vocabulary) tiles of
// at most 256 MiB take their place, a power of two of tokens.
#include <fmt/format.h>

#include <algorithm>

#include "src/config/train_config.h"

namespace strata {
namespace {

constexpr double kWholeLogitsBytes = 1ull << 30, kLossTileBytes = 256ull << 20;

double LogitsRowBytes(const TrainConfig& c) { return 4.0 * static_cast<double>(c.model.vocab_size); }
int64_t MicroBatchTokens(const TrainConfig& c) { return c.micro_batch * c.model.seq_len; }

}  // namespace

int64_t AutoLossChunk(const TrainConfig& c) {
  const double row = LogitsRowBytes(c);
  if (row * static_cast<double>(MicroBatchTokens(c)) <= kWholeLogitsBytes) return 0;
  int64_t chunk = 1;
  while (2.0 * static_cast<double>(chunk) * row <= kLossTileBytes) chunk *= 2;
  return std::min(chunk, MicroBatchTokens(c));
}

int64_t LossTileTokens(const TrainConfig& c) {
  const int64_t chunk = c.loss_chunk >= 0 ? c.loss_chunk : AutoLossChunk(c);
  return chunk > 0 ? std::min(chunk, MicroBatchTokens(c)) : MicroBatchTokens(c);
}

void ResolveLossChunk(TrainConfig* c) {
  if (c->loss_chunk >= 0) return;
  c->loss_chunk = AutoLossChunk(*c);
  const double row = LogitsRowBytes(*c), logits = row * static_cast<double>(MicroBatchTokens(*c));
  RecordAuto(c, "strata.loss_chunk", std::to_string(c->loss_chunk),
             c->loss_chunk == 0
                 ? fmt::format("a micro-batch's fp32 logits take {:.2f} GB: untiled", logits / 1e9)
                 : fmt::format("a micro-batch's fp32 logits would take {:.2f} GB (and as much again for their softmax "
                               "and its gradient): tiles of {} tokens, {:.0f} MB each",
                               logits / 1e9, c->loss_chunk, static_cast<double>(c->loss_chunk) * row / 1e6));
}

}  // namespace strata
