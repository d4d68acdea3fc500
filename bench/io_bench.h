// `strata bench io`: sequential write, read, and both at once (a reader and a writer, as a
// step with its states on NVMe) of the NVMe tier's own path (O_DIRECT,
// io_uring, block-sized requests at the given queue depth) against fio's io_uring engine on
// the same folder, file size, block size and queue depth, interleaved in one run; plus the
// pinned-memory memcpy bandwidth on one and on all threads, the checksum (xxh3) alone on one
// thread, and how much of the store's buffers sits on huge pages.
#pragma once

#include <cstdint>
#include <string>

namespace strata::bench {

struct IoBenchOptions {
  std::string dir = "/var/tmp/strata";   // swap folder parent (use a folder on the NVMe drive)
  uint64_t size = 2ull << 30;            // bytes written and read per pass
  uint32_t block = 1u << 20;             // bytes per request (aio.block_size)
  unsigned queue_depth = 32;             // aio.queue_depth
  uint64_t tensor_bytes = 64ull << 20;   // the store moves tensors of this size
  int rounds = 7;                        // interleaved repetitions; medians reported (the VM drifts +-40%)
  bool checksums = true;                 // the store's default
  bool run_fio = true;
  bool small_pages = false;              // the store's buffers in 4 KiB pages (A/B against huge pages)
  std::string engine = "auto";           // auto | uring | pread
  bool json = false;
};

// Prints the table (or one JSON object with --json) to stdout; returns the exit code.
int RunIoBench(const IoBenchOptions& options);

}  // namespace strata::bench
