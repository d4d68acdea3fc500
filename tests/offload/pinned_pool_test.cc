#include "strata/pinned_pool.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

namespace strata {
namespace {

TEST(PinnedPool, BuffersAreAlignedDistinctAndReused) {
  auto pool = PinnedPool::Create(3, 10000, MakeMlockPinner());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  PinnedPool& p = **pool;
  EXPECT_EQ(p.buffer_size(), 12288u);  // rounded up to 4 KiB
  std::vector<PinnedBuffer> held;
  for (int i = 0; i < 3; ++i) held.push_back(p.Acquire());
  for (auto& b : held) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  EXPECT_NE(held[0].data(), held[1].data());
  EXPECT_FALSE(p.TryAcquire().has_value());
  std::byte* first = held[0].data();
  held.erase(held.begin());  // returns buffer 0
  auto again = p.TryAcquire();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->data(), first);
}

TEST(PinnedPool, AcquireBlocksUntilABufferReturns) {
  auto pool = PinnedPool::Create(1, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  PinnedBuffer held = (*pool)->Acquire();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    held.Release();
  });
  PinnedBuffer next = (*pool)->Acquire();  // must not deadlock
  EXPECT_TRUE(next.valid());
  releaser.join();
}

TEST(PinnedPool, RejectsEmptyPools) {
  EXPECT_EQ(PinnedPool::Create(0, 4096, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PinnedPool::Create(2, 0, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(PinnedPool, MovedLeaseReturnsOnce) {
  auto pool = PinnedPool::Create(2, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  {
    PinnedBuffer a = (*pool)->Acquire();
    PinnedBuffer b = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ((*pool)->free_count(), 1u);
  }
  EXPECT_EQ((*pool)->free_count(), 2u);
}

}  // namespace
// Pools sit on transparent huge pages where the kernel offers them (a 1 MiB I/O buffer is
// then one physically contiguous segment); kSmall keeps 4 KiB pages. Skipped where THP is
// switched off ("never"): a setting of the machine, not of Strata.
TEST(PinnedPool, BuffersSitOnHugePagesUnlessAskedNotTo) {
  auto small = PinnedPool::Create(4, 2u << 20, MakeMlockPinner(), HostPages::kSmall);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(HugePageBytes((*small)->region().data(), (*small)->region().size()), 0u);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) GTEST_SKIP() << "THP unavailable here: " << mode;
  auto huge = PinnedPool::Create(4, 2u << 20, MakeMlockPinner());
  ASSERT_TRUE(huge.ok());
  EXPECT_GE(HugePageBytes((*huge)->region().data(), (*huge)->region().size()), 2u << 20) << "THP: " << mode;
}

TEST(PinnedPool, RegionsAreWholeBuffersWithinTheLimit) {
  auto pool = PinnedPool::Create(10, 3 * 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  const auto regions = (*pool)->Regions(/*max_bytes=*/7 * 4096);  // two buffers per region
  ASSERT_EQ(regions.size(), 5u);
  size_t total = 0;
  for (const auto& r : regions) {
    EXPECT_EQ(r.size(), 2u * 3 * 4096);
    EXPECT_EQ(r.data(), (*pool)->region().data() + total);
    total += r.size();
  }
  EXPECT_EQ(total, (*pool)->region().size());
  EXPECT_EQ((*pool)->Regions(1).size(), 10u);  // at least one buffer each
  EXPECT_EQ(PinnedPool::RegionBytes(10, 3 * 4096 - 5), (*pool)->region().size());
}

}  // namespace strata
