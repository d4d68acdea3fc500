// Runs the engine on N ranks as threads of this process (LocalCommunicator) and collects
// what the tests compare: per-step stats of rank 0 and every block's fp32 master weights.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include <torch/types.h>
#include <torch/utils.h>

#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "src/config/train_config.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata::testing {

// A tiny GPT-2: 2 layers, d 64, 4 heads, seq 32, micro-batch 4, fp32, stage 3, no offload.
inline TrainConfig TinyConfig(const std::string& nvme_dir) {
  auto c = ParseTrainConfig(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 3, "sub_group_size": 5000, "stage3_prefetch_bucket_size": 20000},
    "aio": {"block_size": 65536, "queue_depth": 8},
    "strata": {"steps": 5, "seed": 7,
               "model": {"arch": "gpt2", "vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4},
               "data": {"eval_fraction": 0.05}}})", "TinyConfig");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  c->offload_param.nvme_path = nvme_dir;
  c->offload_optimizer.nvme_path = nvme_dir;
  return *c;
}

// The tiny untied LLaMA (grouped-query attention), recomputed, its states and weights on
// NVMe, 2 micro-batches a step, on `schedule`.
inline TrainConfig RecomputedLlama(const std::string& dir, StepSchedule schedule) {
  TrainConfig c = TinyConfig(dir);
  c.model.arch = model::Arch::kLlama;
  c.model.tie_embeddings = false;
  c.model.n_kv_head = 2;
  c.grad_accum = 2;
  c.recompute = Recompute::kAlways;
  c.schedule_setting = schedule;
  c.offload_param.device = c.offload_optimizer.device = Tier::kNvme;
  return c;
}

// A rank's whole state by tensor name, as VisitState gives it (what a checkpoint holds), and
// back into an engine of the same shape.
using StateBytes = std::map<std::string, std::vector<std::byte>>;
inline StateBytes VisitAll(Engine& e) {
  StateBytes out;
  EXPECT_TRUE(e.VisitState([&](const TensorKey& k, std::span<const std::byte> b) {
                out[k.Name()].assign(b.begin(), b.end());
                return Status();
              }).ok());
  return out;
}
inline void RestoreAll(Engine& e, const StateBytes& state) {
  for (const auto& [name, bytes] : state) {
    const Status s = e.RestoreState(*TensorKey::Parse(name), bytes);
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
  }
}

// One rank's engine for `cfg` on `comm` (a failure to build fails the test: null).
inline std::unique_ptr<Engine> MakeEngine(const TrainConfig& cfg, Communicator* comm) {
  auto settled = TrySettle(cfg, comm->world_size());
  EXPECT_TRUE(settled.ok()) << settled.status().ToString();
  if (!settled.ok()) return nullptr;
  auto e = Engine::Create(*settled, comm, nullptr);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(*e) : nullptr;
}

struct RunResult {
  std::vector<StepStats> stats;  // rank 0
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> master;  // [block] -> params
  MemoryLedger ledger;  // rank 0
  std::map<std::string, std::vector<std::byte>> state;  // rank 0's whole shard (VisitState): working, master, m, v
  uint64_t prefetch_high_water = 0, prefetch_budget = 0;
};

// `fake`: each rank runs on a fake asynchronous device (compute_device.h) with these
// options, its collectives on a second set of local communicators; null: the host.
// `hooks`: given to every rank's Engine::Create (with sequence_parallel_size or
// tensor_parallel, each rank's blocks_world its own).
inline RunResult RunEngine(const TrainConfig& cfg, int world, int64_t steps, const FakeDeviceOptions* fake = nullptr,
                           const EngineHooks& hooks = {}) {
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  auto comms = MakeLocalCommunicators(world);
  auto device_comms = MakeLocalCommunicators(world);
  auto blocks_comms = MakeLocalCommunicators(world);  // sequence / tensor parallelism: the blocks' own (Note [Process mesh])
  RunResult result;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[r] = s.ToString(); };
      std::unique_ptr<ComputeDevice> device;
      if (fake) {
        FakeDeviceOptions o = *fake;
        o.seed = fake->seed * 131 + r;
        device = MakeFakeAsyncDevice(device_comms[r].get(), o);
      } else {
        device = MakeHostDevice(comms[r].get());
      }
      auto settled = TrySettle(cfg, world, device->is_host());
      if (!settled.ok()) return fail(settled.status());
      EngineHooks rank_hooks = hooks;
      if (cfg.sequence_parallel * cfg.tensor_parallel > 1) rank_hooks.blocks_world = blocks_comms[r].get();
      auto engine = Engine::Create(*settled, comms[r].get(), nullptr, rank_hooks, device.get());
      if (!engine.ok()) return fail(engine.status());
      for (int64_t s = 0; s < steps; ++s) {
        auto st = (*engine)->Step(s, **data);
        if (!st.ok()) return fail(st.status());
        if (r == 0) result.stats.push_back(*st);
      }
      for (int b = 0; b < (*engine)->num_blocks(); ++b) {
        auto p = (*engine)->MasterParameters(b);
        if (!p.ok()) return fail(p.status());
        if (r == 0) result.master.push_back(*p);
      }
      if (r == 0) {
        result.state = VisitAll(**engine);
        result.ledger = (*engine)->ledger();
        result.prefetch_high_water = (*engine)->prefetch_high_water_bytes();
        result.prefetch_budget = (*engine)->prefetch_budget_bytes();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return result;
}

// Largest |a - b| over all parameters of all blocks.
inline double MaxAbsDiff(const RunResult& a, const RunResult& b) {
  double worst = 0;
  EXPECT_EQ(a.master.size(), b.master.size());
  for (size_t blk = 0; blk < a.master.size() && blk < b.master.size(); ++blk)
    for (size_t i = 0; i < a.master[blk].size(); ++i)
      worst = std::max(worst, (a.master[blk][i].second - b.master[blk][i].second).abs().max().item<double>());
  return worst;
}

inline bool BitwiseEqual(const RunResult& a, const RunResult& b) {
  if (a.master.size() != b.master.size()) return false;
  for (size_t blk = 0; blk < a.master.size(); ++blk)
    for (size_t i = 0; i < a.master[blk].size(); ++i)
      if (!torch::equal(a.master[blk][i].second, b.master[blk][i].second)) return false;
  return true;
}

// Two runs of the same `steps` steps that must be one: the same losses, gradient norms and
// skips, step by step, and every parameter's bits.
inline void ExpectSameRun(const RunResult& want, const RunResult& got, size_t steps) {
  ASSERT_EQ(want.stats.size(), steps);
  ASSERT_EQ(got.stats.size(), steps);
  for (size_t s = 0; s < steps; ++s) {
    EXPECT_EQ(got.stats[s].loss, want.stats[s].loss) << "step " << s;
    EXPECT_EQ(got.stats[s].grad_norm, want.stats[s].grad_norm) << "step " << s;
    EXPECT_EQ(got.stats[s].skipped, want.stats[s].skipped) << "step " << s;
  }
  EXPECT_TRUE(BitwiseEqual(want, got));
}

}  // namespace strata::testing
