// GPU tests (ctest label gpu): each CUDA piece against its CPU twin. They skip cleanly where
// no device is visible (CI compiles and links them there).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda/require_gpu.h"
#include "bench/cuda/cast.h"
#include "strata/cast.h"
#include "bench/cuda/transfer.h"
#include "strata/cuda/cuda.h"
#include "strata/pinned_pool.h"

namespace strata {
namespace {

TEST(Cuda, PinnedRoundTripThroughTheDevice) {
  REQUIRE_GPU();
  constexpr size_t kBytes = (8 << 20) + 4096;
  auto pool = PinnedPool::Create(2, kBytes, cuda::MakeCudaHostPinner());
  ASSERT_TRUE(pool.ok());
  EXPECT_TRUE((*pool)->pinned());
  auto dev = cuda::DeviceBuffer::Allocate(kBytes);
  auto xfer = cuda::MakeTransfer(0);
  ASSERT_TRUE(dev.ok() && xfer.ok());
  PinnedBuffer a = (*pool)->Acquire(), b = (*pool)->Acquire();
  std::mt19937 rng(1);
  for (size_t i = 0; i < kBytes; ++i) a.data()[i] = static_cast<std::byte>(rng());
  auto up = (*xfer)->ToDevice(dev->data(), a.data(), kBytes);
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*xfer)->WaitToDevice(*up).ok());
  auto down = (*xfer)->ToHost(b.data(), dev->data(), kBytes);
  ASSERT_TRUE(down.ok());
  ASSERT_TRUE((*xfer)->WaitToHost(*down).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), kBytes));
}

// Tolerance: none; both sides round to nearest even.
TEST(Cuda, CastKernelMatchesTheCpuReference) {
  REQUIRE_GPU();
  const size_t n = 1000003;
  std::vector<float> src(n);
  std::mt19937 rng(2);
  for (auto& x : src) x = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), rng() % 40 - 20);
  auto d_src = cuda::DeviceBuffer::Allocate(n * 4);
  auto d_dst = cuda::DeviceBuffer::Allocate(n * 2);
  auto xfer = cuda::MakeTransfer(0);
  ASSERT_TRUE(d_src.ok() && d_dst.ok() && xfer.ok());
  ASSERT_TRUE((*xfer)->WaitToDevice(*(*xfer)->ToDevice(d_src->data(), src.data(), n * 4)).ok());
  ASSERT_EQ(cuda::LaunchCastFp32ToBf16(static_cast<const float*>(d_src->data()), static_cast<uint16_t*>(d_dst->data()),
                                       n, nullptr), 0);
  std::vector<uint16_t> got(n);
  ASSERT_TRUE((*xfer)->WaitToHost(*(*xfer)->ToHost(got.data(), d_dst->data(), n * 2)).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], Fp32ToBf16(src[i])) << i;
}

TEST(Cuda, NcclSingleRankCollectives) {
  REQUIRE_GPU();
  auto boot = MakeSingleRankCommunicator();
  auto nccl = cuda::MakeNcclCommunicator(boot.get(), 0);
  ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
  auto d = cuda::DeviceBuffer::Allocate(1024 * 4);
  auto xfer = cuda::MakeTransfer(0);
  ASSERT_TRUE(d.ok() && xfer.ok());
  std::vector<float> h(1024, 1.5f), out(1024);
  ASSERT_TRUE((*xfer)->WaitToDevice(*(*xfer)->ToDevice(d->data(), h.data(), 4096)).ok());
  ASSERT_TRUE((*nccl)->AllReduce(d->data(), 1024, DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE((*xfer)->WaitToHost(*(*xfer)->ToHost(out.data(), d->data(), 4096)).ok());
  EXPECT_EQ(out, h);
  EXPECT_TRUE((*nccl)->Barrier().ok());
}

}  // namespace
}  // namespace strata
