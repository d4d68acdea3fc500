#include "strata/tiered_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/test_util.h"
#include "strata/extent_tier.h"
#include "strata/host_pinner.h"
#include "support/faulty_io_engine.h"
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

// Counts what it is asked to lock and unlock.
class CountingPinner : public HostPinner {
 public:
  const char* name() const override { return "counting"; }
  size_t pinned_ = 0, unpinned_ = 0;

 protected:
  Status Lock(void*, size_t bytes) override {
    pinned_ += bytes;
    return Status();
  }
  void Unlock(void*, size_t bytes) override { unpinned_ += bytes; }
};

TEST(TieredStore, OnlyPageLockedCpuTensorsArePinned) {
  auto pinner = std::make_shared<CountingPinner>();
  const PageLockedBytes before = PageLockedByStrata();
  {
    TieredStoreOptions o;
    o.cpu_pinner = pinner;
    auto store = TieredStore::Create(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Register("working", 4096, Tier::kCpu).ok());
    auto master = (*store)->Register("master", 8192, Tier::kCpu, HostPinning::kPageable);
    ASSERT_TRUE(master.ok());
    EXPECT_EQ(pinner->pinned_, 4096u);
    // Counted whichever way a pinner locks (the run's page-locked figure reads the count).
    EXPECT_EQ(PageLockedByStrata().now, before.now + 4096);
    EXPECT_GE(PageLockedByStrata().peak, before.now + 4096);
    // Pageable memory is the tensor's all the same.
    auto src = RandomBytes(8192, 3);
    std::vector<std::byte> dst(src.size());
    ASSERT_TRUE((*store)->Write(*master, src).Wait().ok());
    ASSERT_TRUE((*store)->Read(*master, dst).Wait().ok());
    EXPECT_EQ(src, dst);
  }
  EXPECT_EQ(pinner->unpinned_, 4096u);
  EXPECT_EQ(PageLockedByStrata().now, before.now);
  TieredStoreOptions off;  // offload_*.pin_memory false: nothing is locked
  off.pin_cpu_tier = false;
  off.cpu_pinner = pinner;
  auto store = TieredStore::Create(off);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Register("working", 4096, Tier::kCpu).ok());
  EXPECT_EQ(pinner->pinned_, 4096u);
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

// Note [Known zero]: a tensor never written reads as zeros in either tier, with no I/O (no
// request, no byte counted, nothing traced); the first write makes it a normal tensor.
TEST(TieredStore, ANeverWrittenTensorReadsAsZerosWithoutIo) {
  TempDir dir;
  TieredStoreOptions o;
  o.enable_nvme = true;
  o.nvme = testing::TierOptions(dir.path());
  std::atomic<int> traced{0};
  o.nvme.on_io = [&](IoOp, const std::string&, uint64_t, auto, auto) { ++traced; };
  auto store = std::move(TieredStore::Create(o)).value();
  for (Tier tier : {Tier::kCpu, Tier::kNvme}) {
    SCOPED_TRACE(TierName(tier));
    const size_t n = 3'000'017;
    auto h = store->Register(std::string("m.") + TierName(tier), n, tier);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    std::vector<std::byte> dst(n, std::byte{0x5a});
    Event t = store->Read(*h, dst);
    EXPECT_TRUE(t.Ready());  // nothing to wait for
    ASSERT_TRUE(t.Wait().ok());
    EXPECT_EQ(dst, std::vector<std::byte>(n));
    // Written: it reads back what was written, from then on.
    auto src = RandomBytes(n, 4);
    ASSERT_TRUE(store->Write(*h, src).Wait().ok());
    ASSERT_TRUE(store->Read(*h, dst).Wait().ok());
    EXPECT_EQ(dst, src);
  }
  const NvmeTierStats st = store->nvme()->stats();
  EXPECT_EQ(st.bytes_read, 3'000'017u);  // the read after the write only
  EXPECT_EQ(st.bytes_written, 3'000'017u);
  EXPECT_EQ(traced.load(), 2);  // that write and that read
}

// The kCpu tier's memory of a never-written tensor is zeros too, and once the caller works
// in it in place, reads give what it wrote there.
TEST(TieredStore, CpuMemoryOfANeverWrittenTensorIsZerosAndThenTheTensor) {
  auto store = MakeStore("");
  auto h = store->Register("v", 4099, Tier::kCpu);
  ASSERT_TRUE(h.ok());
  std::span<std::byte> mem = store->CpuMemory(*h);
  EXPECT_EQ(std::vector<std::byte>(mem.begin(), mem.end()), std::vector<std::byte>(4099));
  mem[17] = std::byte{3};
  std::vector<std::byte> dst(4099);
  ASSERT_TRUE(store->Read(*h, dst).Wait().ok());
  EXPECT_EQ(dst[17], std::byte{3});
}

TEST(TieredStore, ManyThreadsManyOperations) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  constexpr int kPerThread = 60, kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<std::byte>> data;
      std::vector<TensorHandle> hs;
      std::vector<Event> events;
      for (int i = 0; i < kPerThread; ++i) {
        data.push_back(RandomBytes(30000 + 977 * i, t * 1000 + i));
        auto h = store->Register(fmt::format("t{}.{}", t, i), data.back().size(), i % 3 ? Tier::kNvme : Tier::kCpu);
        if (!h.ok()) { failures++; return; }
        hs.push_back(*h);
        events.push_back(store->Write(*h, data.back()));
      }
      for (auto& tk : events) if (!tk.Wait().ok()) failures++;
      events.clear();
      std::vector<std::vector<std::byte>> out(kPerThread);
      for (int i = 0; i < kPerThread; ++i) {
        out[i].resize(data[i].size());
        events.push_back(store->Read(hs[i], out[i]));
      }
      for (int i = 0; i < kPerThread; ++i)
        if (!events[i].Wait().ok() || out[i] != data[i]) failures++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// An NVMe-only store (64 KiB blocks, queue depth 4) whose disk misbehaves as `faults` say.
std::unique_ptr<TieredStore> StoreOnAFaultyDisk(const std::string& dir, std::vector<testing::Fault> faults) {
  TieredStoreOptions o;
  o.enable_nvme = true;
  o.nvme = testing::TierOptions(dir, /*block=*/65536, /*qd=*/4);
  o.nvme.wrap_engine = [faults](std::unique_ptr<IoEngine> e) -> std::unique_ptr<IoEngine> {
    return std::make_unique<testing::FaultyIoEngine>(std::move(e), faults);
  };
  return std::move(TieredStore::Create(o)).value();
}

// Note [Write-backs]: the store keeps a write-back's buffer until the write completed, a
// later read of the tensor sees the written bytes, and an exhausted pool gets the buffer of
// the oldest write-back holding one of its buffers.
TEST(TieredStore, WriteBacksHoldTheirBufferUntilWritten) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  auto pool = PinnedPool::Create(2, 1 << 20, nullptr);
  ASSERT_TRUE(pool.ok());
  std::vector<TensorHandle> h;
  for (int i = 0; i < 3; ++i) h.push_back(*store->Register("w" + std::to_string(i), 1 << 20, Tier::kNvme));
  auto src = RandomBytes(1 << 20, 3);
  for (int i = 0; i < 2; ++i) {
    PinnedBuffer b = (*pool)->Acquire();
    std::memcpy(b.data(), src.data(), src.size());
    b.data()[0] = static_cast<std::byte>(i);
    (void)store->WriteBack(h[i], std::move(b));
  }
  EXPECT_FALSE((*pool)->TryAcquire().has_value());  // both buffers are held by the write-backs
  std::optional<PinnedBuffer> again = store->AcquireBuffer(**pool);  // waits for the oldest
  ASSERT_TRUE(again.has_value());
  again.reset();
  std::vector<std::byte> dst(1 << 20);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(store->Read(h[i], dst).Wait().ok());
    EXPECT_EQ(static_cast<int>(dst[0]), i);
    EXPECT_EQ(0, std::memcmp(dst.data() + 1, src.data() + 1, src.size() - 1));
  }
  ASSERT_TRUE(store->FlushWrites().ok());
  EXPECT_EQ((*pool)->free_count(), 2u);
  EXPECT_FALSE(store->WriteInFlight(h[0]));
  // A pool none of whose buffers a write-back holds: nothing to wait for.
  auto other = PinnedPool::Create(1, 4096, nullptr);
  PinnedBuffer held = (*other)->Acquire();
  EXPECT_FALSE(store->AcquireBuffer(**other).has_value());
}

// A read while the tensor's write-back is still on its way to a (slow) disk is served from
// the write-back's buffer: the new bytes, no disk read, no wait for the write; the buffer
// goes back to its pool only once the write completed.
TEST(TieredStore, AReadDuringAWriteBackCopiesItsBuffer) {
  TempDir dir;
  auto store = StoreOnAFaultyDisk(dir.path(), {{IoOp::kWrite, /*nth=*/1, testing::FaultKind::kSlow, 0, 300000}});
  auto pool = PinnedPool::Create(1, 65536, nullptr);
  ASSERT_TRUE(pool.ok());
  auto h = *store->Register("weights", 65536, Tier::kNvme);
  std::vector<std::byte> old_bytes(65536, std::byte{1});
  ASSERT_TRUE(store->Write(h, old_bytes).Wait().ok());  // request 0
  PinnedBuffer b = (*pool)->Acquire();
  auto fresh = RandomBytes(65536, 9);
  std::memcpy(b.data(), fresh.data(), fresh.size());
  const Event written = store->WriteBack(h, std::move(b));  // request 1: 300 ms late
  const uint64_t read_before = store->nvme()->stats().bytes_read;
  std::vector<std::byte> dst(65536);
  ASSERT_TRUE(store->Read(h, dst).Wait().ok());
  EXPECT_EQ(dst, fresh);
  EXPECT_FALSE(written.Ready());  // served without waiting for the slow write
  EXPECT_EQ(store->nvme()->stats().bytes_read, read_before);
  EXPECT_FALSE((*pool)->TryAcquire().has_value());  // the write still holds the buffer
  ASSERT_TRUE(store->FlushWrites().ok());
  EXPECT_EQ((*pool)->free_count(), 1u);
  std::fill(dst.begin(), dst.end(), std::byte{0});
  ASSERT_TRUE(store->Read(h, dst).Wait().ok());  // from the disk now
  EXPECT_EQ(dst, fresh);
  EXPECT_GT(store->nvme()->stats().bytes_read, read_before);
}

// A never-written tensor's first write-back, still on its way to a slow disk: a read sees
// the written bytes (from the write-back's buffer), not zeros, and after it the disk's.
TEST(TieredStore, AReadDuringTheFirstWriteBackOfAZeroTensorSeesTheWrite) {
  TempDir dir;
  auto store = StoreOnAFaultyDisk(dir.path(), {{IoOp::kWrite, /*nth=*/0, testing::FaultKind::kSlow, 0, 300000}});
  auto pool = PinnedPool::Create(1, 65536, nullptr);
  ASSERT_TRUE(pool.ok());
  auto h = *store->Register("adam_v", 65536, Tier::kNvme);
  PinnedBuffer b = (*pool)->Acquire();
  auto fresh = RandomBytes(65536, 5);
  std::memcpy(b.data(), fresh.data(), fresh.size());
  const Event written = store->WriteBack(h, std::move(b));
  std::vector<std::byte> dst(65536);
  std::thread reader([&] { EXPECT_TRUE(store->Read(h, dst).Wait().ok()); });
  reader.join();
  EXPECT_EQ(dst, fresh);
  EXPECT_FALSE(written.Ready());
  ASSERT_TRUE(store->FlushWrites().ok());
  std::fill(dst.begin(), dst.end(), std::byte{0});
  ASSERT_TRUE(store->Read(h, dst).Wait().ok());
  EXPECT_EQ(dst, fresh);
  EXPECT_EQ(store->nvme()->stats().bytes_read, 65536u);
}

// A failed write-back leaves the tensor refused on read (kFailed), naming it, and
// FlushWrites reports it; the buffer still goes back to its pool.
TEST(TieredStore, AFailedWriteBackIsRefusedOnRead) {
  TempDir dir;
  auto store = StoreOnAFaultyDisk(dir.path(), {{IoOp::kWrite, /*nth=*/1, testing::FaultKind::kError, EIO}});
  auto pool = PinnedPool::Create(1, 65536, nullptr);
  ASSERT_TRUE(pool.ok());
  auto h = *store->Register("victim", 65536, Tier::kNvme);
  std::vector<std::byte> zeros(65536);
  ASSERT_TRUE(store->Write(h, zeros).Wait().ok());  // request 0: fine
  (void)store->WriteBack(h, (*pool)->Acquire());    // request 1: EIO
  const Status flushed = store->FlushWrites();
  EXPECT_EQ(flushed.code(), StatusCode::kIoError) << flushed.ToString();
  EXPECT_NE(flushed.message().find("victim"), std::string::npos) << flushed.ToString();
  EXPECT_EQ((*pool)->free_count(), 1u);
  const Status read = store->Read(h, zeros).Wait();
  EXPECT_FALSE(read.ok());
  EXPECT_NE(read.message().find("'victim'"), std::string::npos) << read.ToString();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A tensor registered in parts (Note [Expert-aware fetching]): each part its own NVMe extent,
// so ReadParts moves the listed parts' bytes only, into their places, from the disk, known
// zeros or the cpu tier alike (and from a write-back in flight: the next test).
TEST(TieredStore, PartsReadAlone) {
  TempDir dir;
  auto store = MakeStore(dir.path());
  const std::vector<uint64_t> parts = {0, 1000, 5000, 70001};  // unaligned, of 100,000 bytes
  const auto src = RandomBytes(100'000, 5);
  for (Tier tier : {Tier::kCpu, Tier::kNvme}) {
    SCOPED_TRACE(TierName(tier));
    auto h = store->Register(std::string("parted.") + TierName(tier), src.size(), tier, HostPinning::kPageable, parts);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_EQ(store->num_parts(*h), 4);
    EXPECT_EQ(store->part(*h, 2), (std::pair<uint64_t, uint64_t>{5000, 70001}));
    std::vector<std::byte> dst(src.size(), std::byte{0x5a});
    ASSERT_TRUE(store->ReadParts(*h, dst, std::vector<int>{1}).Wait().ok());  // never written: zeros
    EXPECT_EQ(dst[999], std::byte{0x5a});
    EXPECT_EQ(dst[1000], std::byte{0});
    EXPECT_EQ(dst[5000], std::byte{0x5a});
    ASSERT_TRUE(store->Write(*h, src).Wait().ok());
    const uint64_t before = tier == Tier::kNvme ? store->nvme()->stats().bytes_read : 0;
    std::fill(dst.begin(), dst.end(), std::byte{0x5a});
    ASSERT_TRUE(store->ReadParts(*h, dst, std::vector<int>{1, 3}).Wait().ok());
    EXPECT_EQ(0, std::memcmp(dst.data() + 1000, src.data() + 1000, 4000));
    EXPECT_EQ(0, std::memcmp(dst.data() + 70001, src.data() + 70001, 100'000 - 70001));
    EXPECT_EQ(dst[0], std::byte{0x5a});
    EXPECT_EQ(dst[69'999], std::byte{0x5a});
    if (tier == Tier::kNvme) {
      EXPECT_EQ(store->nvme()->stats().bytes_read - before, 4000u + 100'000 - 70001);
    }
    std::fill(dst.begin(), dst.end(), std::byte{0});
    ASSERT_TRUE(store->Read(*h, dst).Wait().ok());  // every part
    EXPECT_EQ(dst, src);
  }
  // Parts out of order, or beyond the tensor: refused, naming the tensor.
  auto bad = store->Register("bad", 100, Tier::kNvme, HostPinning::kPageable, {0, 50, 40});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'bad'"), std::string::npos) << bad.status().ToString();
}

TEST(TieredStore, PartsFromAWriteBackInFlight) {
  TempDir dir;
  auto store = StoreOnAFaultyDisk(dir.path(), {{IoOp::kWrite, /*nth=*/4, testing::FaultKind::kSlow, 0, 300000}});
  auto pool = PinnedPool::Create(1, 65536, nullptr);
  ASSERT_TRUE(pool.ok());
  auto h = *store->Register("parted", 65536, Tier::kNvme, HostPinning::kPageLocked, {0, 4096, 40000});
  ASSERT_TRUE(store->Write(h, std::vector<std::byte>(65536, std::byte{1})).Wait().ok());  // requests 0-2
  PinnedBuffer b = (*pool)->Acquire();
  const auto fresh = RandomBytes(65536, 2);
  std::memcpy(b.data(), fresh.data(), fresh.size());
  const Event written = store->WriteBack(h, std::move(b));  // its second part (request 4) 300 ms late
  const uint64_t before = store->nvme()->stats().bytes_read;
  std::vector<std::byte> dst(65536, std::byte{0});
  ASSERT_TRUE(store->ReadParts(h, dst, std::vector<int>{2}).Wait().ok());
  EXPECT_EQ(0, std::memcmp(dst.data() + 40000, fresh.data() + 40000, 65536 - 40000));
  EXPECT_EQ(dst[0], std::byte{0});
  EXPECT_FALSE(written.Ready());
  EXPECT_EQ(store->nvme()->stats().bytes_read, before);
  ASSERT_TRUE(store->FlushWrites().ok());
}

// A tier of another kind (extent_tier.h), as GPUDirect storage or a second drive would plug in:
// extents in memory, each transfer completed later on a thread of its own, counted.
class DelayedMemoryTier final : public ExtentTier {
 public:
  StatusOr<ExtentId> Allocate(const std::string&, uint64_t bytes, bool) override {
    std::lock_guard<std::mutex> lock(mu_);
    extents_.emplace_back(bytes);
    return static_cast<ExtentId>(extents_.size() - 1);
  }
  Status RegisterBuffers(std::span<const std::span<std::byte>>) override { return Status(); }
  Event Write(ExtentId id, std::span<const std::byte> src) override {
    return Later([this, id, src] {
      std::lock_guard<std::mutex> lock(mu_);
      std::memcpy(extents_.at(id).data(), src.data(), src.size());
      writes_ += src.size();
    });
  }
  Event Read(ExtentId id, std::span<std::byte> dst) override {
    return Later([this, id, dst] {
      std::lock_guard<std::mutex> lock(mu_);
      std::memcpy(dst.data(), extents_.at(id).data(), dst.size());
      reads_ += dst.size();
    });
  }
  ~DelayedMemoryTier() override {
    for (std::thread& t : threads_) t.join();
  }
  uint64_t reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }

 private:
  Event Later(std::function<void()> work) {
    auto state = std::make_shared<HostEventState>();
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([state, work = std::move(work)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      work();
      state->Set(Status());
    });
    return Event(state);
  }
  std::mutex mu_;
  std::vector<std::vector<std::byte>> extents_;
  std::vector<std::thread> threads_;
  uint64_t reads_ = 0, writes_ = 0;
};

// The store's kNvme home served by a tier that is not the swap file: the same residency (a
// tensor never written reads as zeros with no I/O), write-backs (a read meanwhile copies the
// buffer), parts and budgets, over the ExtentTier interface alone.
TEST(TieredStore, AnotherKindOfTierPlugsInAsTheNvmeHome) {
  auto tier = std::make_shared<DelayedMemoryTier>();
  TieredStoreOptions o;
  o.nvme_budget_bytes = 300'000;
  o.nvme_tier = tier;
  auto store = TieredStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->nvme(), nullptr);  // (no swap file)
  const auto src = RandomBytes(100'000, 7);
  auto h = (*store)->Register("parted", src.size(), Tier::kNvme, HostPinning::kPageable, {0, 1000, 70001});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<std::byte> dst(src.size(), std::byte{0x5a});
  ASSERT_TRUE((*store)->Read(*h, dst).Wait().ok());
  EXPECT_EQ(dst, std::vector<std::byte>(src.size(), std::byte{0}));  // known zero
  EXPECT_EQ(tier->reads(), 0u);
  ASSERT_TRUE((*store)->Write(*h, src).Wait().ok());
  std::fill(dst.begin(), dst.end(), std::byte{0x5a});
  ASSERT_TRUE((*store)->ReadParts(*h, dst, std::vector<int>{1}).Wait().ok());
  EXPECT_EQ(0, std::memcmp(dst.data() + 1000, src.data() + 1000, 69'001));
  EXPECT_EQ(dst[0], std::byte{0x5a});
  EXPECT_EQ(tier->reads(), 69'001u);
  auto pool = PinnedPool::Create(1, 100'000, nullptr);
  ASSERT_TRUE(pool.ok());
  PinnedBuffer b = (*pool)->Acquire();
  const auto next = RandomBytes(100'000, 8);
  std::memcpy(b.data(), next.data(), next.size());
  (void)(*store)->WriteBack(*h, std::move(b));
  ASSERT_TRUE((*store)->Read(*h, dst).Wait().ok());  // from the write-back's buffer, or after it
  EXPECT_EQ(dst, next);
  ASSERT_TRUE((*store)->FlushWrites().ok());
  EXPECT_EQ((*pool)->free_count(), 1u);
  std::fill(dst.begin(), dst.end(), std::byte{0});
  ASSERT_TRUE((*store)->Read(*h, dst).Wait().ok());  // from the tier
  EXPECT_EQ(dst, next);
  auto over = (*store)->Register("over", 250'000, Tier::kNvme);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace strata
