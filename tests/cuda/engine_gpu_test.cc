// The engine on a CUDA device (ctest label gpu; built with -DSTRATA_CUDA=ON, skipped where
// no device is visible): one rank, NCCL for the device collectives, every state offloaded;
// the blocks' group collectives on the calling stream; two GPUs where two are visible.
#include <gtest/gtest.h>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda/require_gpu.h"
#include "engine/engine_test_util.h"
#include "strata/cuda/cuda.h"
#include "support/settled.h"

namespace strata {
namespace {

// Bitwise comparisons need deterministic kernels (cuBLAS workspace, no atomics in backward).
void Deterministic() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
}

// `synchronous`: every device operation waited for at once (the schedule before the overlap).
testing::RunResult RunOnGpu(const TrainConfig& cfg, int64_t steps, bool synchronous = false) {
  testing::RunResult result;
  auto host = MakeSingleRankCommunicator();
  auto opened = OpenComputeDevice("cuda:0", 0, host.get());
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return result;
  if (synchronous) opened->device = MakeSynchronousDevice(std::move(opened->device));
  ComputeDevice& device = *opened->device;
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  auto engine = Engine::Create(testing::Settled(cfg, host->world_size(), device.is_host()), host.get(), nullptr, {}, &device);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return result;
  for (int64_t s = 0; s < steps; ++s) {
    auto st = (*engine)->Step(s, **data);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return result;
    result.stats.push_back(*st);
  }
  for (int b = 0; b < (*engine)->num_blocks(); ++b) {
    auto p = (*engine)->MasterParameters(b);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) result.master.push_back(*p);
  }
  return result;
}

// `strata estimate` on a GPU machine plans with the GPU train opens: the first GPU run's
// estimate said "device memory unknown" and planned the gradient sums on the host (431 GB
// out per step) where train summed them on the device (27 GB).
TEST(GpuEngine, TheEstimateSeesTheDeviceTrainOpens) {
  REQUIRE_GPU();
  auto host = MakeSingleRankCommunicator();
  auto opened = OpenComputeDevice("cuda", 0, host.get());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_GT(opened->device->MemoryBytes(), 0u);
  EXPECT_EQ(VisibleDeviceMemory("cuda", 0), opened->device->MemoryBytes());
  EXPECT_EQ(VisibleDeviceMemory("auto", 0), opened->device->MemoryBytes());
  EXPECT_EQ(VisibleDeviceMemory("cuda:0", 0), opened->device->MemoryBytes());
  EXPECT_EQ(VisibleDeviceMemory("cpu", 0), 0u);
  EXPECT_EQ(VisibleDeviceMemory("cuda:4096", 0), 0u);
}

TEST(GpuEngine, OffloadNoneCpuNvmeAreBitwiseIdentical) {
  REQUIRE_GPU();
  Deterministic();
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  c.compute_dtype = DType::kBF16;
  std::vector<testing::RunResult> runs;
  for (Tier d : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
    c.offload_param.device = c.offload_optimizer.device = d;
    runs.push_back(RunOnGpu(c, 5));
    ASSERT_EQ(runs.back().stats.size(), 5u) << OffloadDeviceName(d);
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    for (int s = 0; s < 5; ++s) EXPECT_EQ(runs[0].stats[s].loss, runs[i].stats[s].loss) << "run " << i << " step " << s;
    EXPECT_TRUE(testing::BitwiseEqual(runs[0], runs[i])) << "run " << i;
  }
  EXPECT_LT(runs[0].stats[4].loss, runs[0].stats[0].loss);
}

// Tolerance: losses within 1e-4 relative; weights within 1e-3 absolute after 5 AdamW steps
// of lr 2e-3 (fp32 compute on both sides, but a different summation order: a parameter
// whose tiny gradient changes sign moves by up to lr per step).
TEST(GpuEngine, AgreesWithTheCpuRunOfTheSameModel) {
  REQUIRE_GPU();
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  c.compute_dtype = DType::kF32;
  c.offload_param.device = Tier::kNvme;
  c.offload_optimizer.device = Tier::kCpu;
  auto gpu = RunOnGpu(c, 5);
  auto cpu = testing::RunEngine(c, 1, 5);
  ASSERT_EQ(gpu.stats.size(), 5u);
  ASSERT_EQ(cpu.stats.size(), 5u);
  for (int s = 0; s < 5; ++s)
    EXPECT_NEAR(gpu.stats[s].loss, cpu.stats[s].loss, 1e-4 * std::abs(cpu.stats[s].loss)) << "step " << s;
  EXPECT_LT(testing::MaxAbsDiff(gpu, cpu), 1e-3);
}

TEST(GpuEngine, Fp16SkipsAPlantedOverflowAndRecovers) {
  REQUIRE_GPU();
  testing::TempDir dir;
  TrainConfig c = testing::TinyConfig(dir.path());
  c.compute_dtype = DType::kF16;
  c.loss_scale.initial_scale_power = 10;
  c.loss_scale.hysteresis = 1;
  c.debug_overflow_step = 2;
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  auto r = RunOnGpu(c, 5);
  ASSERT_EQ(r.stats.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(r.stats[s].skipped, s == 2) << "step " << s;
  EXPECT_EQ(r.stats[2].loss_scale, 1024.0);
  EXPECT_EQ(r.stats[3].loss_scale, 512.0);
  EXPECT_TRUE(std::isfinite(r.stats[4].loss));
  EXPECT_LT(r.stats[4].loss, r.stats[0].loss);
}

// The overlapped schedule (copy and collective streams ordered by events) against the same
// operations each waited for at once: bitwise equal, for offloaded, resident and partly
// resident working weights.
TEST(GpuEngine, TheOverlappedScheduleIsBitwiseTheSynchronousOne) {
  REQUIRE_GPU();
  Deterministic();
  testing::TempDir dir;
  for (int64_t resident : {0, 2, -1}) {
    SCOPED_TRACE(::testing::Message() << "resident blocks " << resident);
    TrainConfig c = testing::TinyConfig(dir.path());
    c.compute_dtype = DType::kBF16;
    c.offload_param.device = resident == -1 ? Tier::kDevice : Tier::kNvme;
    c.offload_optimizer.device = Tier::kCpu;
    c.resident_blocks = resident;
    auto overlapped = RunOnGpu(c, 5), synchronous = RunOnGpu(c, 5, /*synchronous=*/true);
    ASSERT_EQ(overlapped.stats.size(), 5u);
    ASSERT_EQ(synchronous.stats.size(), 5u);
    for (int s = 0; s < 5; ++s) EXPECT_EQ(overlapped.stats[s].loss, synchronous.stats[s].loss) << "step " << s;
    EXPECT_TRUE(testing::BitwiseEqual(overlapped, synchronous));
  }
}

// The blocks' group collectives on a GPU (ComputeDevice::BlockGroup) run on the stream of the
// block that calls them: an all-to-all of a group of one (a copy) issued on a stream of the
// pool right after a long product on it reads the product, not what its buffer held before.
TEST(GpuEngine, ABlockGroupRunsOnTheCallingStream) {
  REQUIRE_GPU();
  auto host = MakeSingleRankCommunicator();
  auto opened = OpenComputeDevice("cuda:0", 0, host.get());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto group = opened->device->BlockGroup(MakeSingleRankCommunicator());
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  const torch::Device gpu = opened->device->device();
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  c10::StreamGuard on(guard.getStreamFromGlobalPool(gpu));
  for (int round = 0; round < 3; ++round) {
    const torch::Tensor a = torch::randn({2048, 2048}, torch::TensorOptions().device(gpu));
    torch::Tensor product = a;
    for (int i = 0; i < 8; ++i) product = torch::tanh(product.matmul(a) / 64);
    torch::Tensor out = torch::full_like(product, -7.0);
    ASSERT_TRUE((*group)->AllToAll(product.data_ptr(), out.data_ptr(), product.numel(), DType::kF32).ok());
    ASSERT_TRUE((*group)->AllReduce(out.data_ptr(), out.numel(), DType::kF32, ReduceOp::kSum).ok());
    EXPECT_TRUE(torch::equal(out, product)) << "round " << round;
  }
}

// Ranks as threads of this process, rank r on GPU r (NCCL for ZeRO's and the blocks' groups,
// each met through local communicators); rank 0's losses.
std::vector<double> LossesOnGpus(const TrainConfig& cfg, int world, int64_t steps) {
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  auto hosts = MakeLocalCommunicators(world), blocks = MakeLocalCommunicators(world);
  std::vector<double> losses;
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto opened = OpenComputeDevice(fmt::format("cuda:{}", r), r, hosts[r].get());
      if (!opened.ok()) return void(errors[r] = opened.status().ToString());
      auto settled = testing::TrySettle(cfg, world, /*host_device=*/false);
      if (!settled.ok()) return void(errors[r] = settled.status().ToString());
      EngineHooks hooks;
      hooks.blocks_world = blocks[r].get();
      auto engine = Engine::Create(*settled, hosts[r].get(), nullptr, hooks, opened->device.get());
      if (!engine.ok()) return void(errors[r] = engine.status().ToString());
      for (int64_t s = 0; s < steps; ++s) {
        auto st = (*engine)->Step(s, **data);
        if (!st.ok()) return void(errors[r] = st.status().ToString());
        if (r == 0) losses.push_back(st->loss);
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return losses;
}

// Tensor 2 and sequence 2 on two GPUs train as data parallelism does on the same global batch.
TEST(GpuEngine, SplitLayersAndRowsTrainAsDataParallelOnTwoGpus) {
  REQUIRE_GPU();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than two GPUs visible";
  testing::TempDir dir;
  TrainConfig data = testing::RecomputedLlama(dir.path(), StepSchedule::kMicroBatch);
  data.compute_dtype = DType::kF32;
  data.micro_batch_set = data.micro_batch = 2;
  const std::vector<double> whole = LossesOnGpus(data, 2, 5);
  ASSERT_EQ(whole.size(), 5u);
  for (int64_t TrainConfig::*axis : {&TrainConfig::tensor_parallel, &TrainConfig::sequence_parallel}) {
    TrainConfig split = data;
    split.*axis = 2;
    split.micro_batch_set = split.micro_batch = 4;
    const std::vector<double> losses = LossesOnGpus(split, 2, 5);
    ASSERT_EQ(losses.size(), 5u);
    for (size_t s = 0; s < 5; ++s) EXPECT_NEAR(losses[s], whole[s], 1e-5 * std::abs(whole[s])) << "step " << s;
  }
}

}  // namespace
}  // namespace strata
