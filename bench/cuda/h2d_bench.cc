// strata-cuda-bench: pinned H2D and D2H bandwidth of the store's path (a PinnedPool
// page-locked with cudaHostRegister, copies through cuda::Transfer on its dedicated
// streams, block by block as the store moves shards) against the anchor: one plain
// cudaMemcpyAsync between the same pinned buffer and device memory, interleaved, medians.
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/cuda/transfer.h"
#include "strata/cuda/cuda.h"
#include "strata/pinned_pool.h"
#include "strata/log.h"

using namespace strata;

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::stoull(argv[1]) : (1ull << 30);
  const size_t block = argc > 2 ? std::stoull(argv[2]) : (64ull << 20);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  std::string why;
  if (!cuda::DeviceAvailable(&why)) {
    std::fprintf(stderr, "strata-cuda-bench: %s\n", why.c_str());
    return 77;  // skipped
  }
  auto pool = PinnedPool::Create(1, bytes, cuda::MakeCudaHostPinner());
  auto dev = cuda::DeviceBuffer::Allocate(bytes);
  auto xfer = cuda::MakeTransfer(0);
  if (!pool.ok() || !dev.ok() || !xfer.ok()) {
    std::fprintf(stderr, "set-up failed: %s %s %s\n", pool.status().ToString().c_str(), dev.status().ToString().c_str(),
                 xfer.status().ToString().c_str());
    return 1;
  }
  PinnedBuffer host = (*pool)->Acquire();
  cudaStream_t plain;
  cudaStreamCreateWithFlags(&plain, cudaStreamNonBlocking);
  std::vector<double> store_h2d, store_d2h, plain_h2d, plain_d2h;
  for (int r = 0; r < rounds; ++r) {
    for (int dir = 0; dir < 2; ++dir) {
      const bool h2d = dir == 0;
      // The store's path: block-sized copies on the dedicated stream, wait on the last.
      double t0 = bench::NowSeconds();
      uint64_t last = 0;
      for (size_t off = 0; off < bytes; off += block) {
        const size_t n = std::min(block, bytes - off);
        auto s = h2d ? (*xfer)->ToDevice(static_cast<char*>(dev->data()) + off, host.data() + off, n)
                     : (*xfer)->ToHost(host.data() + off, static_cast<char*>(dev->data()) + off, n);
        if (!s.ok()) return std::fprintf(stderr, "%s\n", s.status().ToString().c_str()), 1;
        last = *s;
      }
      if (!(h2d ? (*xfer)->WaitToDevice(last) : (*xfer)->WaitToHost(last)).ok()) return 1;
      (h2d ? store_h2d : store_d2h).push_back(bytes / (bench::NowSeconds() - t0) / 1e9);
      // The anchor: one plain cudaMemcpyAsync of the same bytes.
      t0 = bench::NowSeconds();
      cudaMemcpyAsync(h2d ? dev->data() : host.data(), h2d ? (const void*)host.data() : dev->data(), bytes,
                      h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, plain);
      cudaStreamSynchronize(plain);
      (h2d ? plain_h2d : plain_d2h).push_back(bytes / (bench::NowSeconds() - t0) / 1e9);
    }
  }
  const auto sh = bench::Summarize(store_h2d), sd = bench::Summarize(store_d2h);
  const auto ph = bench::Summarize(plain_h2d), pd = bench::Summarize(plain_d2h);
  nlohmann::json j = {{"bytes", bytes}, {"block", block}, {"rounds", rounds}, {"pinned", (*pool)->pinned()},
                      {"store_h2d_gbps", sh.median}, {"plain_h2d_gbps", ph.median}, {"h2d_ratio", sh.median / ph.median},
                      {"store_d2h_gbps", sd.median}, {"plain_d2h_gbps", pd.median}, {"d2h_ratio", sd.median / pd.median}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
