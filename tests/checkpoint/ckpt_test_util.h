// Shared by the checkpoint tests: run a function on N ranks as threads (LocalCommunicator),
// and compare tensors bitwise.
#pragma once

#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <functional>
#include <thread>

#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "strata/communicator.h"

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

}  // namespace strata::testing
