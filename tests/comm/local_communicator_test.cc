// The local (threads) and single-rank communicators against a serial reference that adds
// in rank order 0..n-1 in fp32: results must match bitwise.
#include <gtest/gtest.h>

#include <thread>

#include "comm/comm_test_util.h"
#include "strata/communicator.h"

namespace strata {
namespace {

using testing::Bytes;
using testing::MakeInput;
using testing::RankOrder;
using testing::ReduceReference;

struct Case {
  int world;
  size_t count;
  DType dtype;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  return fmt::format("n{}_c{}_{}", info.param.world, info.param.count, DTypeName(info.param.dtype));
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int n = 1; n <= 4; ++n)
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}})
      for (DType dt : {DType::kF32, DType::kBF16}) cases.push_back({n, count, dt});
  cases.push_back({3, 1001, DType::kF16});
  return cases;
}

// Runs fn(comm) on one thread per rank and joins them.
void RunRanks(std::vector<std::unique_ptr<Communicator>>& comms, const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&fn, &c] { fn(*c); });
  for (auto& t : threads) t.join();
}

std::vector<std::unique_ptr<Communicator>> Make(int n) {
  if (n == 1) {
    std::vector<std::unique_ptr<Communicator>> v;
    v.push_back(MakeSingleRankCommunicator());
    return v;
  }
  return MakeLocalCommunicators(n);
}

class LocalCollectives : public ::testing::TestWithParam<Case> {};

TEST_P(LocalCollectives, AllGatherMatchesConcatenation) {
  const auto [n, count, dt] = GetParam();
  const size_t bytes = count * DTypeSize(dt);
  auto comms = Make(n);
  std::vector<Bytes> shards, fulls(static_cast<size_t>(n), Bytes(n * bytes));
  for (int r = 0; r < n; ++r) shards.push_back(MakeInput(r, count, dt));
  RunRanks(comms, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    ASSERT_TRUE(c.AllGather(shards[r].data(), fulls[r].data(), count, dt).ok());
  });
  Bytes expected;
  for (auto& s : shards) expected.insert(expected.end(), s.begin(), s.end());
  for (int r = 0; r < n; ++r) EXPECT_EQ(fulls[static_cast<size_t>(r)], expected) << "rank " << r;
}

TEST_P(LocalCollectives, AllGatherInPlace) {
  const auto [n, count, dt] = GetParam();
  const size_t bytes = count * DTypeSize(dt);
  auto comms = Make(n);
  std::vector<Bytes> fulls(static_cast<size_t>(n), Bytes(n * bytes));
  Bytes expected;
  for (int r = 0; r < n; ++r) {
    Bytes s = MakeInput(r, count, dt);
    std::copy(s.begin(), s.end(), fulls[static_cast<size_t>(r)].begin() + r * bytes);
    expected.insert(expected.end(), s.begin(), s.end());
  }
  RunRanks(comms, [&](Communicator& c) {
    uint8_t* full = fulls[static_cast<size_t>(c.rank())].data();
    ASSERT_TRUE(c.AllGather(full + c.rank() * bytes, full, count, dt).ok());
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(fulls[static_cast<size_t>(r)], expected) << "rank " << r;
}

TEST_P(LocalCollectives, ReduceScatterSumsInRankOrder) {
  const auto [n, count, dt] = GetParam();
  auto comms = Make(n);
  const auto order = RankOrder(n);
  std::vector<Bytes> fulls, shards(static_cast<size_t>(n), Bytes(count * DTypeSize(dt)));
  for (int r = 0; r < n; ++r) fulls.push_back(MakeInput(r, n * count, dt));
  const std::vector<Bytes> before = fulls;
  RunRanks(comms, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    ASSERT_TRUE(c.ReduceScatter(fulls[r].data(), shards[r].data(), count, dt, ReduceOp::kSum).ok());
  });
  for (int r = 0; r < n; ++r) {
    Bytes ref = ReduceReference(fulls, r * count, count, dt, ReduceOp::kSum, [&](size_t) -> const auto& { return order; });
    EXPECT_EQ(shards[static_cast<size_t>(r)], ref) << "rank " << r;
  }
  EXPECT_EQ(fulls, before) << "reduce-scatter modified its input";
}

TEST_P(LocalCollectives, AllReduceSumAndMax) {
  const auto [n, count, dt] = GetParam();
  auto comms = Make(n);
  const auto order = RankOrder(n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<Bytes> data;
    for (int r = 0; r < n; ++r) data.push_back(MakeInput(r, count, dt, 7));
    Bytes ref = ReduceReference(data, 0, count, dt, op, [&](size_t) -> const auto& { return order; });
    RunRanks(comms, [&](Communicator& c) {
      ASSERT_TRUE(c.AllReduce(data[static_cast<size_t>(c.rank())].data(), count, dt, op).ok());
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(data[static_cast<size_t>(r)], ref) << "rank " << r;
  }
}

TEST_P(LocalCollectives, BroadcastFromEveryRoot) {
  const auto [n, count, dt] = GetParam();
  auto comms = Make(n);
  for (int root = 0; root < n; ++root) {
    std::vector<Bytes> data;
    for (int r = 0; r < n; ++r) data.push_back(MakeInput(r, count, dt));
    const Bytes expected = data[static_cast<size_t>(root)];
    RunRanks(comms, [&](Communicator& c) {
      ASSERT_TRUE(c.Broadcast(data[static_cast<size_t>(c.rank())].data(), count, dt, root).ok());
      ASSERT_TRUE(c.Barrier().ok());
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(data[static_cast<size_t>(r)], expected) << "root " << root << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, LocalCollectives, ::testing::ValuesIn(AllCases()), Name);

TEST(LocalCommunicator, RepeatedAllReducesAreBitwiseIdentical) {
  constexpr int kN = 4;
  constexpr size_t kCount = 100003;
  auto comms = MakeLocalCommunicators(kN);
  std::vector<Bytes> first;
  for (int run = 0; run < 5; ++run) {
    std::vector<Bytes> data;
    for (int r = 0; r < kN; ++r) data.push_back(MakeInput(r, kCount, DType::kBF16, 3));
    RunRanks(comms, [&](Communicator& c) {
      ASSERT_TRUE(c.AllReduce(data[static_cast<size_t>(c.rank())].data(), kCount, DType::kBF16, ReduceOp::kSum).ok());
    });
    if (run == 0) first = data;
    EXPECT_EQ(data, first) << "run " << run;
  }
}

TEST(LocalCommunicator, ManyBackToBackCollectivesDoNotRace) {
  constexpr int kN = 3;
  auto comms = MakeLocalCommunicators(kN);
  RunRanks(comms, [&](Communicator& c) {
    for (int i = 0; i < 2000; ++i) {
      float x = static_cast<float>(c.rank() + i);
      ASSERT_TRUE(c.AllReduce(&x, 1, DType::kF32, ReduceOp::kSum).ok());
      ASSERT_EQ(x, static_cast<float>(3 * i + 3));
      float y = c.rank() == i % kN ? static_cast<float>(i) : -1.0f;
      ASSERT_TRUE(c.Broadcast(&y, 1, DType::kF32, i % kN).ok());
      ASSERT_EQ(y, static_cast<float>(i));
    }
  });
}

TEST(LocalCommunicator, NamesRankAndWorld) {
  auto comms = MakeLocalCommunicators(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<size_t>(r)]->world_size(), 3);
  }
  EXPECT_STREQ(comms[0]->name(), "local");
}

}  // namespace
}  // namespace strata
