// Round trips through the NVMe tier: sizes from 1 byte to 256 MiB, host memory at offsets
// that are not multiples of the block size (or of 4 KiB), many operations in flight, the
// pread fallback engine, and tampering with the swap file behind the tier's back.
#include "strata/nvme_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "offload/test_util.h"
#include "strata/pinned_pool.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using testing::TierOptions;

struct RoundTripCase {
  uint64_t bytes;
  size_t host_offset;  // where the tensor starts inside its host buffer
};

class NvmeRoundTrip : public ::testing::TestWithParam<IoEngineKind> {};

TEST_P(NvmeRoundTrip, SizesAndOffsetsFromOneByteTo256MiB) {
  TempDir dir;
  auto opts = TierOptions(dir.path(), /*block=*/1u << 20, /*qd=*/32);
  opts.engine = GetParam();
  auto tier = NvmeTier::Open(opts);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const std::vector<RoundTripCase> cases = {
      {1, 0},          {1, 3},           {511, 1},        {4095, 0},          {4096, 0},
      {4096, 4095},    {4097, 17},       {65537, 4096 + 5}, {(1 << 20) - 1, 1}, {1 << 20, 0},
      {1 << 20, 513},  {(1 << 20) + 4097, 0}, {(7 << 20) + 123, 4096}, {256ull << 20, 0}, {(3 << 20) + 1, 1000},
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "bytes=" << c.bytes << " host_offset=" << c.host_offset);
    auto src = RandomBytes(c.bytes + c.host_offset, seed++);
    std::vector<std::byte> dst(c.bytes + c.host_offset + 3, std::byte{0x5a});
    auto id = (*tier)->Allocate("t" + std::to_string(seed), c.bytes);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ((*tier)->file_offset(*id) % (c.bytes >= (1u << 20) ? (1u << 20) : 4096u), 0u);
    ASSERT_TRUE((*tier)->Write(*id, {src.data() + c.host_offset, c.bytes}).Wait().ok());
    Status s = (*tier)->Read(*id, {dst.data() + c.host_offset, c.bytes}).Wait();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(0, std::memcmp(dst.data() + c.host_offset, src.data() + c.host_offset, c.bytes));
    // Nothing written outside the destination range.
    for (size_t i = 0; i < c.host_offset; ++i) ASSERT_EQ(dst[i], std::byte{0x5a});
    for (size_t i = c.host_offset + c.bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], std::byte{0x5a});
    (*tier)->Free(*id);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeRoundTrip, ::testing::Values(IoEngineKind::kAuto, IoEngineKind::kPread),
                         [](const auto& info) { return info.param == IoEngineKind::kAuto ? "uring" : "pread"; });

TEST(NvmeTier, UsesIoUringWithODirectOnARealDisk) {
  TempDir dir;
  auto tier = NvmeTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_TRUE((*tier)->direct_io());
  EXPECT_STREQ((*tier)->engine_name(), "io_uring");
  // Private folder 0700, swap file 0600.
  EXPECT_EQ(std::filesystem::status((*tier)->folder()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_EQ(std::filesystem::status((*tier)->file_path()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST(NvmeTier, HundredsOfConcurrentOperationsFromPinnedBuffers) {
  TempDir dir;
  constexpr int kTensors = 400;
  constexpr size_t kBytes = 96 * 1024 + 123;  // small blocks: many requests per tensor
  auto pool = PinnedPool::Create(kTensors, kBytes, MakeMlockPinner());
  ASSERT_TRUE(pool.ok());
  auto opts = TierOptions(dir.path(), /*block=*/16384, /*qd=*/64);
  opts.registered_buffers = {(*pool)->region()};
  auto tier = NvmeTier::Open(opts);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::vector<PinnedBuffer> bufs;
  std::vector<ExtentId> ids;
  std::vector<Event> events;
  for (int i = 0; i < kTensors; ++i) {
    bufs.push_back((*pool)->Acquire());
    auto data = RandomBytes(kBytes, 1000 + i);
    std::memcpy(bufs.back().data(), data.data(), kBytes);
    auto id = (*tier)->Allocate("p" + std::to_string(i), kBytes);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (int i = 0; i < kTensors; ++i) events.push_back((*tier)->Write(ids[i], {bufs[i].data(), kBytes}));
  for (auto& t : events) ASSERT_TRUE(t.Wait().ok());
  for (auto& b : bufs) std::memset(b.data(), 0, kBytes);
  events.clear();
  // Reads in reverse order, all in flight together.
  for (int i = kTensors - 1; i >= 0; --i) events.push_back((*tier)->Read(ids[i], {bufs[i].data(), kBytes}));
  for (auto& t : events) ASSERT_TRUE(t.Wait().ok());
  for (int i = 0; i < kTensors; ++i) {
    auto want = RandomBytes(kBytes, 1000 + i);
    ASSERT_EQ(0, std::memcmp(bufs[i].data(), want.data(), kBytes)) << "tensor " << i;
  }
  EXPECT_GT((*tier)->stats().requests, static_cast<uint64_t>(kTensors) * 2 * 6);
}

// Where O_DIRECT is unavailable (some tmpfs, or switched off) the buffered pread engine
// takes over. Kernels >= 6.6 accept O_DIRECT on tmpfs, so both cases are checked.
TEST(NvmeTier, FallsBackToPreadWithoutODirect) {
  TempDir dir;
  std::vector<std::string> folders = {dir.path() + "/buffered"};
  const std::string tmpfs = testing::TmpfsDir();
  if (!tmpfs.empty()) folders.push_back(tmpfs + "/strata-test-fallback-" + std::to_string(getpid()));
  for (const std::string& folder : folders) {
    SCOPED_TRACE(folder);
    auto opts = TierOptions(folder);
    const bool tmp = folder.rfind("/dev/shm", 0) == 0;
    opts.direct_io = tmp;  // tmpfs: let the kernel decide; real disk: switched off
    auto tier = NvmeTier::Open(opts);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    if (!(*tier)->direct_io()) {
      EXPECT_STREQ((*tier)->engine_name(), "pread");
    }
    if (!tmp) {
      EXPECT_FALSE((*tier)->direct_io());
    }
    auto src = RandomBytes(3 * 1048576 + 11, 7);
    std::vector<std::byte> dst(src.size());
    auto id = (*tier)->Allocate("fallback", src.size());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*tier)->Write(*id, src).Wait().ok());
    ASSERT_TRUE((*tier)->Read(*id, dst).Wait().ok());
    EXPECT_EQ(src, dst);
    tier->reset();
    if (tmp) std::filesystem::remove_all(folder);
  }
}

TEST(NvmeTier, CleanShutdownRemovesTheSwapFolder) {
  TempDir dir;
  std::string folder;
  {
    auto tier = NvmeTier::Open(TierOptions(dir.path()));
    ASSERT_TRUE(tier.ok());
    folder = (*tier)->folder();
    auto id = (*tier)->Allocate("x", 12345);
    ASSERT_TRUE(id.ok());
    auto src = RandomBytes(12345, 3);
    ASSERT_TRUE((*tier)->Write(*id, src).Wait().ok());
    EXPECT_TRUE(std::filesystem::exists(folder));
  }
  EXPECT_FALSE(std::filesystem::exists(folder));
}

// Tampering with the swap file behind the tier's back.
class NvmeTamper : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tier = NvmeTier::Open(TierOptions(dir_.path(), 1u << 20, 8));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(tier).value();
    for (int i = 0; i < 3; ++i) {
      data_.push_back(RandomBytes(2 * 1048576 + 4096 * i + 77, 50 + i));
      auto id = tier_->Allocate("layer" + std::to_string(i) + ".master", data_.back().size());
      ASSERT_TRUE(id.ok());
      ids_.push_back(*id);
      ASSERT_TRUE(tier_->Write(*id, data_.back()).Wait().ok());
    }
  }
  Status ReadBack(int i) {
    std::vector<std::byte> dst(data_[i].size());
    Status s = tier_->Read(ids_[i], dst).Wait();
    if (s.ok() && dst != data_[i]) return Status(StatusCode::kInternal, "read OK but data differs");
    return s;
  }
  TempDir dir_;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<std::vector<std::byte>> data_;
  std::vector<ExtentId> ids_;
};

TEST_F(NvmeTamper, OverwrittenBytesAreDetectedByChecksum) {
  int fd = open(tier_->file_path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char junk[] = "not what the store wrote";
  ASSERT_EQ(pwrite(fd, junk, sizeof junk, tier_->file_offset(ids_[1]) + 100000), (ssize_t)sizeof junk);
  fsync(fd);
  close(fd);
  Status s = ReadBack(1);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("layer1.master"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadBack(0).ok());
  EXPECT_TRUE(ReadBack(2).ok());
}

TEST_F(NvmeTamper, TruncatedFileIsDetected) {
  ASSERT_EQ(truncate(tier_->file_path().c_str(), tier_->file_offset(ids_[2]) + 1048576), 0);
  Status s = ReadBack(2);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("layer2.master"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadBack(0).ok());
  EXPECT_TRUE(ReadBack(1).ok());
}

TEST_F(NvmeTamper, TruncationInsideTheLastBlockIsDetectedByChecksum) {
  // Cut a few bytes from the tensor's tail: the read is short by less than a block, the
  // page beyond EOF reads as zeros or fails; either way it must not pass as valid.
  ASSERT_EQ(truncate(tier_->file_path().c_str(), tier_->file_offset(ids_[2]) + data_[2].size() - 5), 0);
  Status s = ReadBack(2);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer2.master"), std::string::npos) << s.message();
}

TEST(NvmeTier, RejectsBadOptionsByName) {
  TempDir dir;
  auto o = TierOptions(dir.path());
  o.block_size = 1000;
  auto t = NvmeTier::Open(o);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("block_size"), std::string::npos);
  o = TierOptions(dir.path());
  o.queue_depth = 0;
  EXPECT_NE(NvmeTier::Open(o).status().message().find("queue_depth"), std::string::npos);
  o = TierOptions("");
  EXPECT_NE(NvmeTier::Open(o).status().message().find("nvme_path"), std::string::npos);
}

TEST(NvmeTier, ReadOfNeverWrittenTensorIsRefused) {
  TempDir dir;
  auto tier = NvmeTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(tier.ok());
  auto id = (*tier)->Allocate("fresh", 100);
  ASSERT_TRUE(id.ok());
  std::vector<std::byte> dst(100);
  Status s = (*tier)->Read(*id, dst).Wait();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("fresh"), std::string::npos);
}

TEST(NvmeTier, FreedSpaceIsReused) {
  TempDir dir;
  auto tier = NvmeTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(tier.ok());
  auto a = (*tier)->Allocate("a", 3 << 20);
  auto b = (*tier)->Allocate("b", 1 << 20);
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t size = (*tier)->file_bytes();
  (*tier)->Free(*a);
  auto c = (*tier)->Allocate("c", 2 << 20);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*tier)->file_bytes(), size);
  EXPECT_EQ((*tier)->file_offset(*c), 0u);
}

}  // namespace
// Memory registered after the tier opened (the engine's pools) is registered by the thread
// that drives the ring (a single-issuer io_uring accepts nothing else), once nothing is in
// flight; transfers from it then count as registered.
TEST(NvmeTier, BuffersRegisteredLaterGoThroughThePumpThread) {
  TempDir dir;
  struct Recorder final : IoEngine {
    explicit Recorder(std::unique_ptr<IoEngine> e) : inner(std::move(e)) {}
    const char* name() const override { return inner->name(); }
    unsigned queue_depth() const override { return inner->queue_depth(); }
    Status RegisterFiles(std::span<const int> fds) override { return inner->RegisterFiles(fds); }
    Status RegisterBuffers(std::span<const std::span<std::byte>> r) override {
      register_thread = std::this_thread::get_id();
      in_flight_at_register = in_flight;
      regions = r.size();
      return inner->RegisterBuffers(r);
    }
    Status Submit(std::span<const IoRequest> reqs) override {
      submit_thread = std::this_thread::get_id();
      in_flight += static_cast<long>(reqs.size());
      return inner->Submit(reqs);
    }
    Status Reap(unsigned min, std::vector<IoCompletion>* out) override {
      const size_t before = out->size();
      Status s = inner->Reap(min, out);
      in_flight -= static_cast<long>(out->size() - before);
      return s;
    }
    Status AttachDrivingThread() override { return inner->AttachDrivingThread(); }
    std::unique_ptr<IoEngine> inner;
    std::atomic<long> in_flight{0};
    long in_flight_at_register = -1;
    size_t regions = 0;
    std::thread::id register_thread, submit_thread;
  };
  Recorder* rec = nullptr;
  auto opts = TierOptions(dir.path(), /*block=*/65536, /*qd=*/8);
  opts.wrap_engine = [&](std::unique_ptr<IoEngine> e) {
    auto r = std::make_unique<Recorder>(std::move(e));
    rec = r.get();
    return std::unique_ptr<IoEngine>(std::move(r));
  };
  auto tier = NvmeTier::Open(opts);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  constexpr size_t kBytes = 4u << 20;
  auto pool = PinnedPool::Create(3, kBytes, MakeMlockPinner());
  ASSERT_TRUE(pool.ok());
  auto src = RandomBytes(kBytes, 5);
  std::vector<ExtentId> ids;
  std::vector<Event> writes;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(*(*tier)->Allocate("t" + std::to_string(i), kBytes));
    writes.push_back((*tier)->Write(ids[i], src));  // from unregistered memory, in flight
  }
  ASSERT_TRUE((*tier)->RegisterBuffers((*pool)->Regions()).ok());
  for (auto& w : writes) ASSERT_TRUE(w.Wait().ok());
  EXPECT_EQ(rec->register_thread, rec->submit_thread);
  EXPECT_EQ(rec->in_flight_at_register, 0);
  EXPECT_EQ(rec->regions, 2u);  // the staging buffers and the pool
  EXPECT_EQ((*tier)->stats().unregistered_bytes, 3 * kBytes);

  std::vector<PinnedBuffer> bufs;
  for (int i = 0; i < 3; ++i) bufs.push_back((*pool)->Acquire());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*tier)->Read(ids[i], bufs[i].span()).Wait().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(0, std::memcmp(bufs[i].data(), src.data(), kBytes));
  EXPECT_EQ((*tier)->stats().unregistered_bytes, 3 * kBytes);  // the reads landed in registered memory
}

}  // namespace strata
