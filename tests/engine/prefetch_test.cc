// PrefetchScheduler over a real TieredStore: order, budget (Note [Prefetch budget]), errors,
// and an empty pool served by the oldest write-back.
#include "src/engine/prefetch.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "offload/test_util.h"
#include "support/faulty_io_engine.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

// A store whose tensor g has bytes_of(g) bytes, every byte equal to g. `nvme`: the tensors
// live in a swap folder (else in the cpu tier).
struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<TieredStore> store;
  std::vector<TensorHandle> tensors;

  Fixture(int n, uint64_t (*bytes_of)(int), bool nvme, std::vector<testing::Fault> faults = {}) {
    TieredStoreOptions o;
    o.enable_nvme = nvme;
    o.nvme = testing::TierOptions(dir.path(), /*block=*/4096, /*qd=*/4);
    if (!faults.empty())
      o.nvme.wrap_engine = [faults](std::unique_ptr<IoEngine> e) -> std::unique_ptr<IoEngine> {
        return std::make_unique<testing::FaultyIoEngine>(std::move(e), faults);
      };
    store = std::move(TieredStore::Create(o)).value();
    for (int g = 0; g < n; ++g) {
      const uint64_t bytes = bytes_of(g);
      tensors.push_back(*store->Register("t" + std::to_string(g), bytes, nvme ? Tier::kNvme : Tier::kCpu));
      std::vector<std::byte> v(bytes, static_cast<std::byte>(g));
      EXPECT_TRUE(store->Write(tensors.back(), v).Wait().ok());
    }
  }
  std::vector<PrefetchScheduler::Item> Plan(const std::vector<int>& blocks) const {
    std::vector<PrefetchScheduler::Item> items;
    for (int g : blocks) items.push_back({g, tensors[g], {}, {}});
    return items;
  }
};

TEST(Prefetch, DeliversThePlanInOrderWithinTheBudget) {
  Fixture f(4, [](int g) -> uint64_t { return 1000u + 100u * g; }, /*nvme=*/true);
  auto pool = PinnedPool::Create(4, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  const std::vector<int> plan = {0, 1, 2, 3, 2, 1, 0};
  PrefetchScheduler p(f.Plan(plan), f.store.get(), pool->get(), /*budget=*/2500, nullptr);
  for (int g : plan) {
    auto buf = p.Take(g);
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    for (uint64_t i = 0; i < 1000u + 100u * g; ++i) ASSERT_EQ(static_cast<int>(buf->data()[i]), g) << i;
  }
  EXPECT_TRUE(p.done());
  EXPECT_LE(p.high_water_bytes(), 2500u);
  EXPECT_GE(p.high_water_bytes(), 2100u);  // it did prefetch two blocks ahead
}

TEST(Prefetch, ABudgetSmallerThanOneBlockStillMakesProgress) {
  Fixture f(3, [](int) { return uint64_t{3000}; }, /*nvme=*/false);
  auto pool = PinnedPool::Create(2, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  PrefetchScheduler p(f.Plan({0, 1, 2}), f.store.get(), pool->get(), /*budget=*/10, nullptr);
  for (int g : {0, 1, 2}) ASSERT_TRUE(p.Take(g).ok());
  EXPECT_EQ(p.high_water_bytes(), 3000u);  // one block at a time
}

TEST(Prefetch, AFailedReadIsReturnedToTheTaker) {
  // The second read request (tensor 1's) fails with EIO.
  Fixture f(2, [](int) { return uint64_t{100}; }, /*nvme=*/true, {{IoOp::kRead, 1, testing::FaultKind::kError, EIO}});
  auto pool = PinnedPool::Create(3, 4096, nullptr);
  ASSERT_TRUE(pool.ok());
  PrefetchScheduler p(f.Plan({0, 1}), f.store.get(), pool->get(), 1000, nullptr);
  ASSERT_TRUE(p.Take(0).ok());
  auto b = p.Take(1);
  EXPECT_EQ(b.status().code(), StatusCode::kIoError) << b.status().ToString();
  EXPECT_NE(b.status().message().find("'t1'"), std::string::npos) << b.status().ToString();
}

// The pool's only buffer is held by a write-back: the store hands it over once written,
// and the read that follows sees what that write-back wrote.
TEST(Prefetch, AnEmptyPoolIsServedByTheOldestWriteBack) {
  Fixture f(1, [](int) { return uint64_t{8192}; }, /*nvme=*/true);
  auto pool = PinnedPool::Create(1, 8192, nullptr);
  ASSERT_TRUE(pool.ok());
  PinnedBuffer lease = (*pool)->Acquire();
  std::memset(lease.data(), 7, 8192);
  (void)f.store->WriteBack(f.tensors[0], std::move(lease));
  PrefetchScheduler p(f.Plan({0}), f.store.get(), pool->get(), 1 << 20, nullptr);
  auto b = p.Take(0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(static_cast<int>(b->data()[0]), 7);
  EXPECT_EQ(static_cast<int>(b->data()[8191]), 7);
}

}  // namespace
}  // namespace strata
