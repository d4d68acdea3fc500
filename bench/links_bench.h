// `strata bench links`: every link a training step moves bytes over, in one table, each
// against an anchor measured in the same run and beside the hardware's stated figure where
// one is known:
//   host memcpy, pinned (the store's buffers), 1 thread and all threads   vs  the same copy
//       of pageable memory (ordinary heap pages): what pinning and huge pages cost or give
//   NVMe write / read through the tier at one aio setting   vs  fio io_uring with registered
//       buffers and file at that setting; physical: the drive's PCIe link when it has one
//   GPU rows (bench/gpu_links.h), absent in a CPU build or without a device.
#pragma once

#include <cstdint>
#include <string>

namespace strata::bench {

struct LinksOptions {
  std::string dir = "/var/tmp/strata";   // the drive to measure
  uint32_t block = 1u << 20;             // aio.block_size for the NVMe rows
  unsigned queue_depth = 32;             // aio.queue_depth
  uint64_t nvme_bytes = 512ull << 20;    // per NVMe pass
  uint64_t copy_bytes = 256ull << 20;    // per host or GPU copy
  int rounds = 5;                        // interleaved; medians
  bool run_fio = true;
  bool json = false;
};

// Prints the table (or one JSON object with --json) to stdout; returns the exit code.
int RunLinksBench(const LinksOptions& options);

}  // namespace strata::bench
