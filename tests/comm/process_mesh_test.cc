// The process mesh (Note [Process mesh]): coordinates in Megatron's order, groups along any
// set of axes, and group communicators over the local (threads) world whose collectives
// match a serial reference bitwise, also when the ranks interleave groups of different axes
// at random moments, as tensor- and data-parallel code does.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "comm/group_check.h"
#include "strata/check.h"
#include "strata/process_mesh.h"

namespace strata {
namespace {

using testing::CheckGroupCollectives;

ProcessMesh Mesh(MeshShape shape, int rank) {
  auto mesh = ProcessMesh::Make(shape, shape.world(), rank);
  STRATA_CHECK(mesh.ok()) << mesh.status().ToString();
  return *mesh;
}

TEST(ProcessMesh, CoordinatesFollowMegatronsOrderTensorFastest) {
  const MeshShape shape{2, 2, 2};
  for (int r = 0; r < 8; ++r) {
    const ProcessMesh mesh = Mesh(shape, r);
    EXPECT_EQ(mesh.coord(), (MeshCoord{r / 4, r % 2, (r / 2) % 2})) << r;
    EXPECT_EQ(mesh.RankOf(mesh.coord()), r);
  }
  const ProcessMesh five = Mesh(shape, 5);  // data 1, sequence 0, tensor 1
  EXPECT_EQ(five.GroupRanks(kTensorAxis), (std::vector<int>{4, 5}));
  EXPECT_EQ(five.GroupRanks(kSequenceAxis), (std::vector<int>{5, 7}));
  EXPECT_EQ(five.GroupRanks(kDataAxis), (std::vector<int>{1, 5}));
  EXPECT_EQ(five.GroupRanks(kDataAxis | kSequenceAxis), (std::vector<int>{1, 3, 5, 7}));  // ZeRO's, with Ulysses
  EXPECT_EQ(five.GroupRanks(kDataAxis | kTensorAxis | kSequenceAxis).size(), 8u);
  EXPECT_EQ(five.GroupRanks(0), (std::vector<int>{5}));
  // The group index tells the groups of one axis apart: each index once, every rank in one.
  for (unsigned axes : {unsigned{kTensorAxis}, unsigned{kDataAxis}, unsigned{kDataAxis | kSequenceAxis}}) {
    std::vector<int> seen(8, -1);
    for (int r = 0; r < 8; ++r) {
      const ProcessMesh m = Mesh(shape, r);
      for (int member : m.GroupRanks(axes)) EXPECT_EQ(Mesh(shape, member).GroupIndex(axes), m.GroupIndex(axes));
      EXPECT_LT(m.GroupIndex(axes), 8 / static_cast<int>(m.GroupRanks(axes).size()));
    }
  }
  EXPECT_EQ(five.Describe(), "data 2 x tensor 2 x sequence 2");
}

TEST(ProcessMesh, AShapeThatIsNotTheWorldIsRefusedNamingTheSizes) {
  auto bad = ProcessMesh::Make({2, 2, 1}, 6, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("data 2 x tensor 2 x sequence 1 is 4 ranks, but the world has 6"),
            std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(ProcessMesh::Make({0, 1, 1}, 0, 0).ok());
  EXPECT_FALSE(ProcessMesh::Make({1, 2, 1}, 2, 2).ok());
}

// Runs body(rank, world) on one thread per rank of a local world.
void RunWorld(int n, const std::function<int(int, Communicator&)>& body) {
  auto comms = MakeLocalCommunicators(n);
  std::vector<int> codes(static_cast<size_t>(n), -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { codes[r] = body(r, *comms[r]); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

struct GroupCase {
  MeshShape shape;
  unsigned axes;
};

class GroupCollectives : public ::testing::TestWithParam<GroupCase> {};

TEST_P(GroupCollectives, MatchTheGroupOrderReferenceBitwise) {
  const auto [shape, axes] = GetParam();
  RunWorld(shape.world(), [&](int rank, Communicator& world) {
    const ProcessMesh mesh = Mesh(shape, rank);
    auto group = MakeGroupCommunicator(world, mesh, axes);
    for (DType dt : {DType::kF32, DType::kBF16})
      for (size_t count : {size_t{1}, size_t{7}, size_t{5003}})
        if (int rc = CheckGroupCollectives(*group, mesh, axes, count, dt)) return rc;
    return 0;
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, GroupCollectives,
                         ::testing::Values(GroupCase{{2, 2, 1}, kTensorAxis}, GroupCase{{2, 2, 1}, kDataAxis},
                                           GroupCase{{1, 2, 2}, kSequenceAxis}, GroupCase{{2, 1, 2}, kSequenceAxis},
                                           GroupCase{{2, 1, 2}, kDataAxis | kSequenceAxis},
                                           GroupCase{{2, 2, 2}, kTensorAxis}, GroupCase{{1, 3, 1}, kTensorAxis},
                                           GroupCase{{3, 1, 1}, kTensorAxis}, GroupCase{{4, 1, 1}, kDataAxis}),
                         [](const auto& info) {
                           const GroupCase& c = info.param;
                           std::string axes;
                           for (auto [bit, name] : {std::pair{kDataAxis, "data"}, {kTensorAxis, "tensor"},
                                                    {kSequenceAxis, "sequence"}})
                             if (c.axes & bit) axes += name;
                           return fmt::format("d{}t{}s{}_{}", c.shape.data, c.shape.tensor, c.shape.sequence, axes);
                         });

// Each rank alternates a tensor group, the world and a data group, 20 rounds, each call at a
// random moment of its own: the groups of one axis meet in the same world collective, so
// the results are the reference's whatever the timing.
TEST(GroupCollectives, InterleavedAxesAtRandomMomentsKeepTheirOrder) {
  const MeshShape shape{2, 2, 1};
  RunWorld(4, [&](int rank, Communicator& world) {
    const ProcessMesh mesh = Mesh(shape, rank);
    auto tensor = MakeGroupCommunicator(world, mesh, kTensorAxis);
    auto data = MakeGroupCommunicator(world, mesh, kDataAxis);
    std::mt19937 rng(1234 + rank);
    for (int round = 0; round < 20; ++round) {
      if (int rc = CheckGroupCollectives(*tensor, mesh, kTensorAxis, 3 + round, DType::kF32, &rng)) return rc;
      testing::MaybeDelay(&rng);
      float x = static_cast<float>(rank + round);
      if (!world.AllReduce(&x, 1, DType::kF32, ReduceOp::kSum).ok() || x != static_cast<float>(6 + 4 * round))
        return testing::ChildFail(rank, fmt::format("world all-reduce in round {}: {}", round, x));
      if (int rc = CheckGroupCollectives(*data, mesh, kDataAxis, 5 + round, DType::kBF16, &rng)) return rc;
    }
    return 0;
  });
}

// The base all-to-all (one all-gather) on the local world and on one rank.
TEST(GroupCollectives, WorldAllToAllSendsBlockRToRankR) {
  for (int n : {1, 3}) {
    auto comms = n == 1 ? std::vector<std::unique_ptr<Communicator>>{} : MakeLocalCommunicators(n);
    if (n == 1) comms.push_back(MakeSingleRankCommunicator());
    std::vector<std::thread> threads;
    std::vector<std::vector<float>> got(static_cast<size_t>(n), std::vector<float>(2 * n));
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        std::vector<float> send(2 * n);
        for (int j = 0; j < 2 * n; ++j) send[j] = static_cast<float>(100 * r + j);
        EXPECT_TRUE(comms[r]->AllToAll(send.data(), got[r].data(), 2, DType::kF32).ok());
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < 2; ++k) EXPECT_EQ(got[r][2 * i + k], static_cast<float>(100 * i + 2 * r + k)) << r << i << k;
  }
}

}  // namespace
}  // namespace strata
