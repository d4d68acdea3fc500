// Shared by the checkpoint tests: run a function on N ranks as threads (LocalCommunicator),
// and compare tensors bitwise.
#pragma once

#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <functional>
#include <thread>

#include "src/checkpoint/checkpoint.h"
#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "strata/communicator.h"
#include "support/settled.h"

namespace strata::testing {

// Runs fn(rank, comm) on `world` threads; returns every rank's error, one per line ("" if none).
inline std::string RunRanks(int world, const std::function<Status(int rank, Communicator& comm)>& fn) {
  auto comms = MakeLocalCommunicators(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Status s = fn(r, *comms[r]);
      if (!s.ok()) errors[r] = s.ToString();
    });
  for (auto& t : threads) t.join();
  std::string all;
  for (int r = 0; r < world; ++r)
    if (!errors[r].empty()) all += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  return all;
}

// Every block's fp32 master parameters (collective on all ranks; kept from rank 0).
using Params = std::vector<std::vector<std::pair<std::string, torch::Tensor>>>;
inline Status CollectMaster(Engine& e, int rank, Params* out) {
  for (int b = 0; b < e.num_blocks(); ++b) {
    STRATA_ASSIGN_OR_RETURN(auto p, e.MasterParameters(b));
    if (rank == 0) out->push_back(std::move(p));
  }
  return Status();
}

inline void ExpectBitwiseEqual(const Params& a, const Params& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t blk = 0; blk < a.size(); ++blk) {
    ASSERT_EQ(a[blk].size(), b[blk].size());
    for (size_t i = 0; i < a[blk].size(); ++i)
      EXPECT_TRUE(torch::equal(a[blk][i].second, b[blk][i].second))
          << "block " << blk << " " << a[blk][i].first << " max diff "
          << (a[blk][i].second - b[blk][i].second).abs().max().item<double>();
  }
}

// Trains steps [from, to) on a fresh engine, optionally resuming / saving; collects master.
inline Status Train(const TrainConfig& cfg, int rank, Communicator& comm, int64_t from, int64_t to, const std::string& resume,
                    const std::string& save, Params* out, EngineHooks hooks = {}) {
  STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len));
  STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, comm.world_size()));
  STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(settled, &comm, nullptr, std::move(hooks)));
  if (!resume.empty()) {
    STRATA_ASSIGN_OR_RETURN(int64_t step, ckpt::LoadCheckpoint(*engine, comm, cfg, resume));
    if (step != from) return Error(StatusCode::kInternal, "resumed at step {}, expected {}", step, from);
  }
  for (int64_t s = from; s < to; ++s) STRATA_RETURN_IF_ERROR(engine->Step(s, *data).status());
  if (!save.empty()) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*engine, comm, cfg, save, to));
  return out ? CollectMaster(*engine, rank, out) : Status();
}

// 2 ranks: 6 steps straight, and 3 steps saved to `ck` then resumed for 3 more; the master
// weights of both runs must be bitwise equal. Returns the straight run's.
inline Params ExpectResumeIsBitwise(const TrainConfig& cfg, const std::string& ck) {
  Params straight, resumed;
  EXPECT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 6, "", "", &straight); }), "");
  EXPECT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 0, 3, "", ck, nullptr); }), "");
  EXPECT_EQ(RunRanks(2, [&](int r, Communicator& c) { return Train(cfg, r, c, 3, 6, ck, "", &resumed); }), "");
  testing::ExpectBitwiseEqual(straight, resumed);
  return straight;
}

}  // namespace strata::testing
