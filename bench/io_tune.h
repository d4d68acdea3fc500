// `strata bench tune`: a short I/O sweep within a time budget, then the aio section and the
// pinned buffer count to put in the config, each figure with its fraction of the best the
// store and fio reached; with --write, the config rewritten with them.
//
// Within the budget: one round over the whole grid, then further rounds over the contenders
// only (the best few by the tuning rule, and the best few by read and by write alone, the
// store's and fio's, so that a lucky single sample does not set "the best"), until the budget
// is spent. The pick follows
// PickSetting's rule (bench/tune_rule.h) on the medians.
#pragma once

#include <cstdint>
#include <string>

#include "bench/io_sweep.h"

namespace strata::bench {

struct TuneOptions {
  SweepOptions sweep;           // grid, pass size, folder; rounds is ignored (the budget decides)
  double budget_s = 150;         // no point is started that would end past it (one round at least tried)
  // From the config the tuning is for: the pinned pool's buffer size (the largest block's
  // working shard) and the prefetcher's byte budget; 0 when its parameters are not on NVMe.
  uint64_t param_buffer_bytes = 0;
  uint64_t prefetch_budget_bytes = 0;
  std::string buffer_note;      // why no buffer count is given, when param_buffer_bytes is 0
  std::string config_path;      // the config the settings are for ("" = the built-in one)
  bool write = false;           // rewrite config_path with them
  std::string out_dir;          // "" = none; else io_tune.csv, .json and .svg of what was measured
};

// Prints progress to stderr and the result to stdout; returns the exit code.
int RunIoTune(const TuneOptions& options);

}  // namespace strata::bench
