// PrefetchScheduler with a fake reader: order, budget (Note [Prefetch budget]), errors.
#include "src/engine/prefetch.h"

#include <gtest/gtest.h>

#include <map>

namespace strata {
namespace {

struct FakeReads {
  std::vector<int> issued;
  std::map<int, Status> fail;
  Ticket Issue(int g, std::span<std::byte> dst) {
    issued.push_back(g);
    std::memset(dst.data(), g, dst.size());
    auto it = fail.find(g);
    return it == fail.end() ? Ticket() : Ticket::Failed(it->second);
  }
};

TEST(Prefetch, DeliversThePlanInOrderWithinTheBudget) {
  auto pool = PinnedPool::Create(4, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  FakeReads reads;
  const std::vector<int> plan = {0, 1, 2, 3, 2, 1, 0};
  PrefetchScheduler p(plan, [](int g) { return 1000u + 100u * g; }, /*budget=*/2500, pool->get(),
                      [&](int g, std::span<std::byte> d) { return reads.Issue(g, d); }, nullptr, nullptr);
  for (int g : plan) {
    auto buf = p.Take(g);
    ASSERT_TRUE(buf.ok());
    EXPECT_EQ(static_cast<int>(buf->data()[0]), g);
  }
  EXPECT_TRUE(p.done());
  EXPECT_EQ(reads.issued, plan);
  EXPECT_LE(p.high_water_bytes(), 2500u);
  EXPECT_GE(p.high_water_bytes(), 2100u);  // it did prefetch two groups ahead
}

TEST(Prefetch, ABudgetSmallerThanOneGroupStillMakesProgress) {
  auto pool = PinnedPool::Create(2, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  FakeReads reads;
  PrefetchScheduler p({0, 1, 2}, [](int) { return 3000u; }, /*budget=*/10, pool->get(),
                      [&](int g, std::span<std::byte> d) { return reads.Issue(g, d); }, nullptr, nullptr);
  for (int g : {0, 1, 2}) ASSERT_TRUE(p.Take(g).ok());
  EXPECT_EQ(p.high_water_bytes(), 3000u);  // one group at a time
}

TEST(Prefetch, AFailedReadIsReturnedToTheTaker) {
  auto pool = PinnedPool::Create(3, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  FakeReads reads;
  reads.fail[1] = Status(StatusCode::kDataLoss, "checksum mismatch reading tensor 'block1.working'");
  PrefetchScheduler p({0, 1}, [](int) { return 100u; }, 1000, pool->get(),
                      [&](int g, std::span<std::byte> d) { return reads.Issue(g, d); }, nullptr, nullptr);
  ASSERT_TRUE(p.Take(0).ok());
  auto b = p.Take(1);
  EXPECT_EQ(b.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find("block1.working"), std::string::npos);
}

TEST(Prefetch, EmptyPoolAsksForReclaim) {
  auto pool = PinnedPool::Create(1, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  std::optional<PinnedBuffer> held = (*pool)->Acquire();  // e.g. a write-back still holds it
  FakeReads reads;
  int reclaims = 0;
  PrefetchScheduler p({0}, [](int) { return 100u; }, 1000, pool->get(),
                      [&](int g, std::span<std::byte> d) { return reads.Issue(g, d); },
                      [&] {
                        ++reclaims;
                        held.reset();
                        return true;
                      },
                      nullptr);
  ASSERT_TRUE(p.Take(0).ok());
  EXPECT_EQ(reclaims, 1);
}

}  // namespace
}  // namespace strata
