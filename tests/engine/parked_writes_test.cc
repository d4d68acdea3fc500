// ParkedWrites (Note [Delayed update]): a block's new weights are published (on the
// optimizer's side) once both parked and released by the compute, in either order, once;
// the update waits while `capacity` buffers are parked; Drain publishes the rest as the
// compute releases them.
#include "src/engine/update/parked_writes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace strata {
namespace {

struct Published {
  std::mutex mu;
  std::vector<int> blocks;
  void Add(int b) {
    std::lock_guard<std::mutex> lock(mu);
    blocks.push_back(b);
  }
  std::vector<int> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return blocks;
  }
};

std::unique_ptr<PinnedPool> Pool(size_t n) {
  auto pool = PinnedPool::Create(n, 4096, nullptr, HostPages::kSmall);
  EXPECT_TRUE(pool.ok());
  return std::move(*pool);
}

TEST(ParkedWrites, PublishesOnceParkedAndReleasedInEitherOrder) {
  auto pool = Pool(4);
  Published out;
  ParkedWrites parked(4, 4, [&](int b, PinnedBuffer buf) {
    EXPECT_TRUE(buf.valid());
    out.Add(b);
  });
  parked.Park(3, *pool->TryAcquire());
  EXPECT_TRUE(out.Get().empty());
  EXPECT_EQ(parked.parked(), 1);
  parked.Release(3);  // flagged; the optimizer's side writes it
  EXPECT_TRUE(out.Get().empty());
  parked.WaitForRoom();
  EXPECT_EQ(out.Get(), std::vector<int>({3}));
  parked.Release(2);  // released first: written as soon as it is parked
  parked.Park(2, *pool->TryAcquire());
  EXPECT_EQ(out.Get(), std::vector<int>({3, 2}));
  parked.Release(2);  // twice: nothing more
  parked.Park(1, *pool->TryAcquire());
  parked.Park(0, *pool->TryAcquire());
  EXPECT_EQ(parked.parked(), 2);
  parked.ReleaseAll();
  parked.Drain();
  EXPECT_EQ(out.Get(), std::vector<int>({3, 2, 0, 1}));  // in release order
  EXPECT_EQ(parked.parked(), 0);
  EXPECT_EQ(pool->free_count(), 4u);  // every buffer went back once written
}

TEST(ParkedWrites, TheUpdateWaitsForRoomAndDrainsAsTheComputeReleases) {
  auto pool = Pool(3);
  Published out;
  ParkedWrites parked(3, 2, [&](int b, PinnedBuffer) { out.Add(b); });
  parked.Park(2, *pool->TryAcquire());
  parked.Park(1, *pool->TryAcquire());
  std::atomic<int> stage{0};
  std::thread update([&] {
    parked.WaitForRoom();  // two parked: waits for a release
    stage = 1;
    parked.Park(0, *pool->TryAcquire());
    parked.Drain();  // until the compute releases 1 and 0
    stage = 2;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(stage.load(), 0);
  parked.Release(2);
  while (stage.load() < 1) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(stage.load(), 1);  // draining: 1 and 0 are still read by the compute
  EXPECT_EQ(out.Get(), std::vector<int>({2}));
  parked.Release(0);
  parked.Release(1);
  update.join();
  EXPECT_EQ(out.Get(), std::vector<int>({2, 0, 1}));
  EXPECT_EQ(parked.parked(), 0);
}

}  // namespace
}  // namespace strata
