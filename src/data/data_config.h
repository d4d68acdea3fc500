// What a run trains on (strata.data), without LibTorch: the config tools read it.
#pragma once

#include <cstdint>
#include <string>

namespace strata::data {

enum class TokenFormat { kAuto, kText, kUint16, kUint32 };
enum class Split { kTrain, kEval };
// How sequences are cut (Note [Examples]): random windows of the token stream (pre-training
// text), or whole examples from PATH.examples, one a row and padded, or packed into rows.
enum class Packing { kWindows, kNone, kPacked };
// An example longer than a row: cut into several rows' pieces, or its first piece only.
enum class LongExamples { kSplit, kTruncate };

struct DataConfig {
  std::string path;           // "" = the built-in text
  // auto: *.u16/*.uint16/*.bin -> uint16 (an llm.c header is skipped), *.u32/*.uint32 -> uint32, else text
  TokenFormat format = TokenFormat::kAuto;
  // The loss mask (loss_mask.h): "auto" = PATH.mask next to the token file if it exists,
  // "none" = every token counts, else the mask file's path.
  std::string loss_mask = "auto";
  double eval_fraction = 0.05;  // the last fraction of the tokens is held out for the eval loss
  // Or a validation file (same format rules; its mask, with loss_mask "auto" or a path, the
  // file EVAL_PATH.mask when it exists): then the whole training file trains.
  std::string eval_path;
  // > 0: the training split is read in epochs (Note [Epochs]): consecutive windows of
  // seq_len + 1 tokens, every one once per epoch in a seeded order of its own, the run ending
  // after this many epochs (or strata.steps, whichever comes first); 0: random windows.
  int64_t epochs = 0;
  Packing packing = Packing::kWindows;
  LongExamples long_examples = LongExamples::kSplit;
  // Preference pairs (strata.objective "dpo", Note [DPO]): examples 2k and 2k + 1 of each file
  // are a pair's chosen and rejected completions (PATH.pairs says the file was written so), and
  // a batch of B rows holds B / 2 pairs, their chosen rows first. Set from the objective.
  bool pairs = false;
  uint64_t seed = 1234;
};

}  // namespace strata::data
