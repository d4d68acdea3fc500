#include "strata/pinned_pool.h"

#include <gtest/gtest.h>

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
}  // namespace strata
