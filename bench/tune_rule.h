// What `bench tune` recommends, decided from a sweep table alone (no I/O, tested on synthetic
// tables): the aio setting, and the pinned buffer count that lets it fill its queue.
#pragma once

#include <cstdint>

#include "bench/io_results.h"
#include "strata/status.h"

namespace strata::bench {

struct TunePick {
  uint32_t block = 0;
  unsigned queue_depth = 0;
  double read = 0, write = 0;                 // the store's medians at the pick, GB/s
  double best_read = 0, best_write = 0;       // the store's best medians anywhere in the table
  double fio_best_read = 0, fio_best_write = 0;  // fio's best medians (0 without fio)
  double score = 0;                           // min(read / best_read, write / best_write)
};

// Every setting with both a read and a write row, scored as PickSetting does (empty when the
// table has no read or no write); fio_best_* are left 0.
std::vector<TunePick> ScoreSettings(const SweepTable& table);

// The rule: the setting with both a read and a write row whose worse direction is closest to
// the store's best in that direction, i.e. the highest min(read / best_read, write / best_write).
// Settings within `tie` of that score count as equal (the VM's noise is larger than 1%), and of
// those the one with the fewest bytes in flight (block x queue depth: less pinned memory and
// staging) wins, then the smaller queue depth. kNotFound when no setting has both directions.
StatusOr<TunePick> PickSetting(const SweepTable& table, double tie = 0.01);

// zero_optimization.offload_param.buffer_count for a setting: the engine's working-weight
// fetches keep queue_depth requests busy only with ceil(queue_depth x block / buffer_bytes)
// tensors in flight, and the prefetcher allows max(1, prefetch_budget / buffer_bytes) in
// flight (Note [Prefetch budget]); the smaller of the two, plus the block being computed and
// one being written back, at least 3 (the engine's minimum), at most 1024 (the config's).
// `buffer_bytes`: the largest block's working shard (the pool's buffer size), > 0.
int64_t ParamBufferCount(uint32_t block, unsigned queue_depth, uint64_t buffer_bytes, uint64_t prefetch_budget_bytes);

}  // namespace strata::bench
