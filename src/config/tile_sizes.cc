// strata.loss_chunk and strata.mlp_chunk "auto": whether the head's loss (Note [Tiled loss],
// src/model/tiled_loss.cc) and the MLPs (Note [Tiled MLP], src/model/tiled_rows.cc) run a tile
// of tokens at a time, and how finely. Above 1 GiB of a micro-batch's fp32 logits (8 K tokens
// at a 32 K vocabulary), or of one MLP intermediate [tokens, F] in the compute dtype (48 K
// tokens for a 7 B's F of 11008 in bf16), tiles of at most 256 MiB take their place, a power
// of two of tokens.
#include <algorithm>

#include "src/config/train_config.h"
#include "src/model/model_config.h"

namespace strata {
namespace {

constexpr double kWholeBytes = 1ull << 30, kTileBytes = 256ull << 20;

int64_t MicroBatchTokens(const TrainConfig& c) { return RankMicroBatchTokens(c); }

// The tile for rows of `row` bytes: 0 where a micro-batch's fit in kWholeBytes.
int64_t AutoTile(const TrainConfig& c, double row) {
  if (row * static_cast<double>(MicroBatchTokens(c)) <= kWholeBytes) return 0;
  int64_t chunk = 1;
  while (2.0 * static_cast<double>(chunk) * row <= kTileBytes) chunk *= 2;
  return std::min(chunk, MicroBatchTokens(c));
}

int64_t TileTokens(const TrainConfig& c, int64_t written, int64_t automatic) {
  const int64_t chunk = written >= 0 ? written : automatic;
  return chunk > 0 ? std::min(chunk, MicroBatchTokens(c)) : MicroBatchTokens(c);
}

}  // namespace

double LogitsRowBytes(const TrainConfig& c) { return 4.0 * static_cast<double>(c.model.vocab_size); }
double MlpRowBytes(const TrainConfig& c) {
  return static_cast<double>(DTypeSize(c.compute_dtype)) * static_cast<double>(model::FfnHidden(c.model));
}
int64_t AutoLossChunk(const TrainConfig& c) { return AutoTile(c, LogitsRowBytes(c)); }
int64_t AutoMlpChunk(const TrainConfig& c) { return AutoTile(c, MlpRowBytes(c)); }

int64_t LossTileTokens(const TrainConfig& c) { return TileTokens(c, c.loss_chunk, AutoLossChunk(c)); }
int64_t MlpTileTokens(const TrainConfig& c) { return TileTokens(c, c.mlp_chunk, AutoMlpChunk(c)); }

}  // namespace strata
