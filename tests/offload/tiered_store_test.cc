#include "strata/tiered_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "offload/test_util.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::RandomBytes;
using testing::TempDir;

std::unique_ptr<TieredStore> MakeStore(const std::string& dir, uint64_t cpu_budget = UINT64_MAX,
                                       uint64_t nvme_budget = UINT64_MAX) {
  TieredStoreOptions o;
  o.cpu_budget_bytes = cpu_budget;
  o.nvme_budget_bytes = nvme_budget;
  o.enable_nvme = !dir.empty();
  o.nvme = testing::TierOptions(dir);
  auto s = TieredStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(TieredStore, RoundTripsInBothTiers) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  for (Tier tier : {Tier::kCpu, Tier::kNvme}) {
    auto h = store->Register(std::string("w.") + TierName(tier), 5'000'003, tier);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    auto src = RandomBytes(5'000'003, 9);
    std::vector<std::byte> dst(src.size());
    ASSERT_TRUE(store->Write(*h, src).Wait().ok());
    ASSERT_TRUE(store->Read(*h, dst).Wait().ok());
    EXPECT_EQ(src, dst);
    EXPECT_EQ(store->home(*h), tier);
  }
  EXPECT_EQ(store->used_bytes(Tier::kCpu), 5'000'003u);
  EXPECT_EQ(store->used_bytes(Tier::kNvme), 5'000'003u);
}

TEST(TieredStore, BudgetsAreEnforcedWithTheNumbers) {
  TempDir dir;
  auto store = MakeStore(dir.path(), /*cpu=*/1000, /*nvme=*/1 << 20);
  ASSERT_TRUE(store->Register("a", 600, Tier::kCpu).ok());
  auto b = store->Register("b", 600, Tier::kCpu);
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("'b'"), std::string::npos);
  EXPECT_NE(b.status().message().find("600 of its 1000"), std::string::npos) << b.status().message();
  EXPECT_TRUE(store->Register("c", 1 << 20, Tier::kNvme).ok());
  EXPECT_EQ(store->Register("d", 1, Tier::kNvme).status().code(), StatusCode::kResourceExhausted);
}

TEST(TieredStore, NamesAreUniqueAndFindable) {
  auto store = MakeStore("");
  auto h = store->Register("x", 10, Tier::kCpu);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(store->Register("x", 10, Tier::kCpu).status().code(), StatusCode::kAlreadyExists);
  auto f = store->Find("x");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->index, h->index);
  EXPECT_EQ(store->Find("y").status().code(), StatusCode::kNotFound);
  // No NVMe tier configured: a clear error, not a crash.
  auto n = store->Register("z", 10, Tier::kNvme);
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("nvme_path"), std::string::npos);
}

TEST(TieredStore, ReadBeforeWriteIsRefused) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  auto h = store->Register("empty", 64, Tier::kCpu);
  ASSERT_TRUE(h.ok());
  std::vector<std::byte> dst(64);
  Status s = store->Read(*h, dst).Wait();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("empty"), std::string::npos);
}

TEST(TieredStore, ManyThreadsManyTickets) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  constexpr int kPerThread = 60, kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<std::byte>> data;
      std::vector<TensorHandle> hs;
      std::vector<Ticket> tickets;
      for (int i = 0; i < kPerThread; ++i) {
        data.push_back(RandomBytes(30000 + 977 * i, t * 1000 + i));
        auto h = store->Register(fmt::format("t{}.{}", t, i), data.back().size(), i % 3 ? Tier::kNvme : Tier::kCpu);
        if (!h.ok()) { failures++; return; }
        hs.push_back(*h);
        tickets.push_back(store->Write(*h, data.back()));
      }
      for (auto& tk : tickets) if (!tk.Wait().ok()) failures++;
      tickets.clear();
      std::vector<std::vector<std::byte>> out(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        out[i].resize(data[i].size());
        tickets.push_back(store->Read(hs[i], out[i]));
      }
      for (int i = 0; i < kPerThread; ++i)
        if (!tickets[i].Wait().ok() || out[i] != data[i]) failures++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace strata
