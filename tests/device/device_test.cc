// The asynchronous device path, proven on the fake device (compute_device.h): its queues
// honour `after`, poison what is in flight and propagate failures; and the engine on it,
// under many random delay seeds, gives bitwise the host path's losses and weights for every
// stage, offload and residency. A missing event wait in the engine shows up here as NaN or
// stale data (the note of issue 13 shows one removed on purpose).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include <torch/cuda.h>

#include "engine/engine_test_util.h"
#include "strata/host_pinner.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::TempDir;
using testing::TinyConfig;

std::shared_ptr<HostEventState> Pending() { return std::make_shared<HostEventState>(); }

// The fake device pins as cudaHostRegister does (no mlock), and every pin is counted where
// the run reads its page-locked figure; an unpin releases it.
TEST(FakeDevice, PinsWithoutMlockAndIsCounted) {
  auto comm = MakeSingleRankCommunicator();
  auto dev = MakeFakeAsyncDevice(comm.get(), {});
  std::vector<std::byte> memory(1 << 16);
  const PageLockedBytes before = PageLockedByStrata();
  {
    PinnedRange pinned(dev->MakeHostPinner(), memory.data(), memory.size());
    ASSERT_TRUE(pinned.pinned()) << pinned.refusal().ToString();
    EXPECT_EQ(PageLockedByStrata().now, before.now + memory.size());
    EXPECT_GE(PageLockedByStrata().peak, before.now + memory.size());
  }
  EXPECT_EQ(PageLockedByStrata().now, before.now);
}

// Without a visible GPU (or in a CPU build) `strata estimate` finds no device memory to plan
// with and says so; the GPU side is GpuEngine.TheEstimateSeesTheDeviceTrainOpens.
TEST(FakeDevice, NoVisibleGpuMeansNoDeviceMemory) {
  EXPECT_EQ(VisibleDeviceMemory("cpu", 0), 0u);
  EXPECT_EQ(VisibleDeviceMemory("fake", 0), 0u);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(VisibleDeviceMemory("cuda", 0), 0u);
    EXPECT_EQ(VisibleDeviceMemory("auto", 0), 0u);
  }
}

TEST(FakeDevice, ACopyWaitsForItsEventsAndPoisonsItsDestinationWhileInFlight) {
  auto comm = MakeSingleRankCommunicator();
  auto dev = MakeFakeAsyncDevice(comm.get(), {.seed = 1, .max_delay_us = 0, .copy_gbps = 0.0001, .poison = true});
  std::vector<float> src(1024, 1.5f);  // 4 KiB at 0.1 MB/s: 40 ms in flight
  torch::Tensor dst = torch::zeros({1024});
  auto gate = Pending();
  const Event copied = dev->CopyIn(dst, src.data(), {Event(gate)});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(copied.Ready());
  EXPECT_EQ(dst[0].item<float>(), 0.0f);  // not started: its `after` has not happened
  gate->Set(Status());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(copied.Ready());
  EXPECT_TRUE(std::isnan(dst[7].item<float>()));  // in flight: garbage
  ASSERT_TRUE(copied.Wait().ok());
  EXPECT_TRUE(torch::equal(dst, torch::full({1024}, 1.5f)));
  ASSERT_TRUE(dev->Synchronize().ok());
}

TEST(FakeDevice, AFailureReachesWhatDependsOnItAndSynchronize) {
  auto comm = MakeSingleRankCommunicator();
  auto dev = MakeFakeAsyncDevice(comm.get(), {.seed = 2, .max_delay_us = 100});
  std::vector<float> host(16, 2.0f);
  torch::Tensor t = torch::zeros({16});
  const Event failed = Event::Failed(Status(StatusCode::kIoError, "copy engine fault"));
  const Event in = dev->CopyIn(t, host.data(), {failed});
  const Event out = dev->CopyOut(host.data(), t, {in});
  EXPECT_EQ(out.Wait().code(), StatusCode::kIoError);
  EXPECT_EQ(host[0], 2.0f);  // never ran
  const Status s = dev->Synchronize();
  EXPECT_NE(s.message().find("copy engine fault"), std::string::npos) << s.ToString();
}

TEST(FakeDevice, EachQueueRunsInOrderAndHostCallbacksAfterTheirEvents) {
  auto comm = MakeSingleRankCommunicator();
  auto dev = MakeFakeAsyncDevice(comm.get(), {.seed = 3, .max_delay_us = 2000});
  std::vector<float> a(64, 1.0f), b(64, 2.0f), out(64, 0.0f);
  torch::Tensor t = torch::zeros({64});
  (void)dev->CopyIn(t, a.data(), {});
  const Event second = dev->CopyIn(t, b.data(), {});
  const Event copied = dev->CopyOut(out.data(), t, {second});
  float seen = -1;
  const Event cb = dev->OnHost([&] {
    seen = out[63];
    return Status();
  }, {copied});
  ASSERT_TRUE(cb.Wait().ok());
  EXPECT_EQ(seen, 2.0f);
}

// One engine configuration on the host and on the fake device under a delay seed.
struct Case {
  const char* name;
  void (*configure)(TrainConfig&);
  int world;
};

const Case kCases[] = {
    {"stage3_params_nvme_bf16_tied",
     [](TrainConfig& c) {
       c.compute_dtype = DType::kBF16;
       c.offload_param.device = Tier::kNvme;
       c.offload_optimizer.device = Tier::kCpu;
     },
     2},
    {"stage3_resident_optimizer_nvme_fp32",
     [](TrainConfig& c) {
       c.offload_param.device = Tier::kDevice;  // every block resident on the device
       c.offload_optimizer.device = Tier::kNvme;
     },
     2},
    {"stage2_resident_accum2_bf16",
     [](TrainConfig& c) {
       c.zero_stage = 2;
       c.compute_dtype = DType::kBF16;
       c.grad_accum = 2;
     },
     2},
    {"stage3_partly_resident_fp16_overflow_llama",
     [](TrainConfig& c) {
       c.model.arch = model::Arch::kLlama;
       c.model.tie_embeddings = false;
       c.model.n_kv_head = 2;
       c.compute_dtype = DType::kF16;
       c.debug_overflow_step = 1;
       c.offload_param.device = Tier::kCpu;
       c.resident_blocks = 2;
     },
     1},
    // Note [Device accumulation]: the sums on the device, one copy out per step, bitwise the
    // host's per micro-batch accumulation (fp32 accumulators).
    {"stage3_device_accum3_params_nvme",
     [](TrainConfig& c) {
       c.grad_accum = 3;
       c.device_accumulation = 1;  // summed on the device
       c.offload_param.device = Tier::kNvme;
       c.offload_optimizer.device = Tier::kCpu;
     },
     2},
    {"stage2_device_accum2_bf16_overflow",
     [](TrainConfig& c) {
       c.zero_stage = 2;
       c.compute_dtype = DType::kBF16;
       c.grad_accum = 2;
       c.device_accumulation = 1;  // summed on the device
       c.debug_overflow_step = 1;
     },
     2},
    // strata.master_weights "split": the update reads the weights it replaces from NVMe, a
    // block ahead, while the next forward fetches the new ones.
    {"stage3_split_master_nvme_bf16",
     [](TrainConfig& c) {
       c.compute_dtype = DType::kBF16;
       c.split_master = true;
       c.offload_param.device = Tier::kNvme;
       c.offload_optimizer.device = Tier::kNvme;
     },
     2},
    {"stage1_host_weights_copied_in",
     [](TrainConfig& c) {
       c.zero_stage = 1;
       c.resident_blocks = 0;  // full weights in host memory, copied in per use
       c.offload_optimizer.device = Tier::kCpu;
     },
     2},
};

// One case per test, its 20 delay seeds in a loop: the host run is made once for all of them
// (a test per seed made it again in each ctest process).
class FakeDeviceEngine : public ::testing::TestWithParam<int> {};

TEST_P(FakeDeviceEngine, IsBitwiseTheHostPathUnderRandomDelays) {
  const Case& k = kCases[GetParam()];
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  k.configure(c);
  const testing::RunResult host = RunEngine(c, k.world, 3);
  ASSERT_EQ(host.stats.size(), 3u);
  for (int seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("delay seed " + std::to_string(seed));
    const FakeDeviceOptions fake{.seed = static_cast<uint64_t>(seed), .max_delay_us = 2000};
    const testing::RunResult dev = RunEngine(c, k.world, 3, &fake);
    ASSERT_EQ(dev.stats.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(dev.stats[s].loss, host.stats[s].loss) << "step " << s;
      EXPECT_EQ(dev.stats[s].skipped, host.stats[s].skipped) << "step " << s;
    }
    EXPECT_TRUE(testing::BitwiseEqual(host, dev));
  }
}

// With bf16 host accumulators the device's fp32 sum is rounded once per step instead of once
// per micro-batch: not the host path's bits, but as close as one bf16 rounding of the sum.
TEST(FakeDeviceEngine, DeviceAccumulationHoldsItsSumsOnTheDevice) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 4;
  c.grad_accum_dtype = DType::kBF16;
  c.offload_optimizer.device = Tier::kCpu;
  const FakeDeviceOptions fake{.seed = 5, .max_delay_us = 1000};
  const testing::RunResult per_micro_batch = RunEngine(c, 2, 3, &fake);
  c.device_accumulation = 1;  // summed on the device
  const testing::RunResult on_device = RunEngine(c, 2, 3, &fake);
  EXPECT_EQ(per_micro_batch.ledger.At(StateKind::kGradAccum, Tier::kDevice), 0u);
  EXPECT_EQ(on_device.ledger.At(StateKind::kGradAccum, Tier::kDevice),
            on_device.ledger.At(StateKind::kGradAccum, Tier::kCpu) * 2);  // fp32 there, bf16 here
  ASSERT_EQ(on_device.stats.size(), 3u);
  EXPECT_EQ(on_device.stats[0].loss, per_micro_batch.stats[0].loss);  // the same first weights
  EXPECT_GT(testing::MaxAbsDiff(per_micro_batch, on_device), 0);  // rounded once, not four times
  // Adam moves a weight by about lr per step whatever its gradient's size: where the roundings
  // differ on a gradient near zero the two runs may step apart by 2 lr, but the losses agree.
  EXPECT_LT(testing::MaxAbsDiff(per_micro_batch, on_device), 2 * 3 * c.lr);
  for (int s = 1; s < 3; ++s)
    EXPECT_NEAR(on_device.stats[s].loss, per_micro_batch.stats[s].loss, 0.01 * per_micro_batch.stats[s].loss);
  EXPECT_LT(on_device.stats[2].loss, on_device.stats[0].loss);
}

// Note [Sums straight into the accumulators]: with device accumulation the fp32 sums are
// copied into the page-locked host accumulators themselves; where the device refuses to pin
// them they go through the gradient slots as before. The same bits either way, under delays.
TEST(FakeDeviceEngine, SumsLandInThePinnedAccumulatorsOrGoThroughTheSlots) {
  TempDir dir;
  TrainConfig c = TinyConfig(dir.path());
  c.grad_accum = 3;
  c.device_accumulation = 1;
  c.offload_optimizer.device = Tier::kCpu;
  auto run = [&](bool refuse, std::shared_ptr<LinkCounters> counters) {
    const FakeDeviceOptions fake{.seed = 7, .max_delay_us = 1500, .refuse_pinning = refuse, .counters = counters};
    return RunEngine(c, 1, 3, &fake);
  };
  auto direct_counts = std::make_shared<LinkCounters>(), slot_counts = std::make_shared<LinkCounters>();
  const testing::RunResult direct = run(false, direct_counts), slots = run(true, slot_counts);
  ASSERT_EQ(direct.stats.size(), 3u);
  ASSERT_EQ(slots.stats.size(), 3u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(direct.stats[s].loss, slots.stats[s].loss) << "step " << s;
  EXPECT_TRUE(testing::BitwiseEqual(direct, slots));
  EXPECT_EQ(direct_counts->out.load(), slot_counts->out.load());  // the same bytes leave the device
  EXPECT_EQ(slot_counts->pinned.load(), 0u);
  // Pinned: the pools and gradient slots, and every block's fp32 accumulator.
  EXPECT_GE(direct_counts->pinned.load(), direct.ledger.At(StateKind::kGradAccum, Tier::kCpu));
  EXPECT_LT(direct.stats[2].loss, direct.stats[0].loss);
}

INSTANTIATE_TEST_SUITE_P(Cases, FakeDeviceEngine, ::testing::Range(0, static_cast<int>(std::size(kCases))),
                         [](const auto& info) { return std::string(kCases[info.param].name); });

}  // namespace
}  // namespace strata
