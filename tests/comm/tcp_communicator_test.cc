// The TCP ring communicator across real processes (forked from the test): every
// collective against the ring-order reference (bitwise), large buffers, a dead peer and a
// hung peer (errors naming the rank within the timeout), and the rendezvous timeout.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <cmath>
#include <thread>

#include "comm/comm_test_util.h"
#include "comm/fork_ranks.h"
#include "comm/group_check.h"
#include "src/comm/socket.h"
#include "strata/check.h"
#include "strata/communicator.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using testing::Bytes;
using testing::ChildFail;
using testing::ForkRanks;
using testing::MakeInput;
using testing::ReduceReference;
using testing::RingOrder;

using Clock = std::chrono::steady_clock;

int FreePort() {
  auto port = comm::FindFreePort();
  STRATA_CHECK(port.ok()) << port.status().ToString();
  return *port;
}

LaunchEnv Env(int rank, int n, int port) { return LaunchEnv{rank, n, rank, "127.0.0.1", port}; }

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Every collective, for one dtype and count, checked bitwise against the reference.
int CheckCollectives(Communicator& c, size_t count, DType dt) {
  const int n = c.world_size(), rank = c.rank();
  const size_t esize = DTypeSize(dt);
  const std::string what = fmt::format("count {} {}", count, DTypeName(dt));
  // All-gather.
  Bytes full(n * count * esize), expected;
  for (int r = 0; r < n; ++r) {
    Bytes s = MakeInput(r, count, dt);
    expected.insert(expected.end(), s.begin(), s.end());
  }
  Bytes shard = MakeInput(rank, count, dt);
  if (Status s = c.AllGather(shard.data(), full.data(), count, dt); !s.ok()) return ChildFail(rank, s.ToString());
  if (full != expected) return ChildFail(rank, "all-gather mismatch, " + what);
  // Reduce-scatter: chunk `rank` is summed in ring order.
  std::vector<Bytes> fulls;
  for (int r = 0; r < n; ++r) fulls.push_back(MakeInput(r, n * count, dt, 5));
  const std::vector<int> ring = RingOrder(n, rank);
  Bytes out(count * esize);
  if (Status s = c.ReduceScatter(fulls[rank].data(), out.data(), count, dt, ReduceOp::kSum); !s.ok()) {
    return ChildFail(rank, s.ToString());
  }
  if (out != ReduceReference(fulls, rank * count, count, dt, ReduceOp::kSum, [&](size_t) -> const auto& { return ring; })) {
    return ChildFail(rank, "reduce-scatter mismatch, " + what);
  }
  // All-reduce: element i belongs to chunk i / ceil(count / n).
  const size_t per = (count + n - 1) / n;
  std::vector<std::vector<int>> orders;
  for (int ch = 0; ch < n; ++ch) orders.push_back(RingOrder(n, ch));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<Bytes> data;
    for (int r = 0; r < n; ++r) data.push_back(MakeInput(r, count, dt, 9));
    Bytes mine = data[rank];
    if (Status s = c.AllReduce(mine.data(), count, dt, op); !s.ok()) return ChildFail(rank, s.ToString());
    if (mine != ReduceReference(data, 0, count, dt, op, [&](size_t i) -> const auto& { return orders[i / per]; })) {
      return ChildFail(rank, fmt::format("all-reduce ({}) mismatch, {}", op == ReduceOp::kSum ? "sum" : "max", what));
    }
  }
  // Broadcast from every root, then a barrier.
  for (int root = 0; root < n; ++root) {
    Bytes data = MakeInput(rank, count, dt, 11);
    if (Status s = c.Broadcast(data.data(), count, dt, root); !s.ok()) return ChildFail(rank, s.ToString());
    if (data != MakeInput(root, count, dt, 11)) return ChildFail(rank, fmt::format("broadcast root {} mismatch, {}", root, what));
  }
  if (Status s = c.Barrier(); !s.ok()) return ChildFail(rank, s.ToString());
  return 0;
}

class TcpRing : public ::testing::TestWithParam<int> {};

TEST_P(TcpRing, CollectivesMatchTheRingOrderReferenceBitwise) {
  const int n = GetParam(), port = FreePort();
  auto codes = ForkRanks(n, 30s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, n, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}}) {
        if (int rc = CheckCollectives(**comm, count, dt)) return rc;
      }
    }
    return CheckCollectives(**comm, 999, DType::kF16);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST_P(TcpRing, RepeatedAllReducesAreBitwiseIdentical) {
  const int n = GetParam(), port = FreePort();
  auto codes = ForkRanks(n, 30s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, n, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    Bytes first;
    for (int run = 0; run < 5; ++run) {
      Bytes data = MakeInput(rank, 300007, DType::kF32, 3);
      if (Status s = (*comm)->AllReduce(data.data(), 300007, DType::kF32, ReduceOp::kSum); !s.ok()) {
        return ChildFail(rank, s.ToString());
      }
      if (run == 0) first = data;
      if (data != first) return ChildFail(rank, fmt::format("run {} differs from run 0", run));
    }
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Comm, TcpRing, ::testing::Values(2, 3), [](const auto& info) {
  return fmt::format("ranks{}", info.param);
});

// 64 MiB of fp32 through a 2-rank all-reduce: exact (small integers sum exactly in any
// order), and the bandwidth is printed as a quick figure (algbw = bytes / time; busbw =
// algbw * 2(n-1)/n, the bytes each link carries, as nccl-tests reports).
// Group communicators over the TCP ring (Note [Process mesh]): 4 processes as data 2 x
// tensor 2, each group's collectives and the world's all-to-all against the reference.
TEST(TcpRing, GroupsOfADataByTensorMeshMatchTheReferenceBitwise) {
  constexpr int kN = 4;
  const int port = FreePort();
  auto codes = ForkRanks(kN, 30s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, kN, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    auto mesh = ProcessMesh::Make({2, 2, 1}, kN, rank);
    if (!mesh.ok()) return ChildFail(rank, mesh.status().ToString());
    for (unsigned axes : {unsigned{kTensorAxis}, unsigned{kDataAxis}, unsigned{kDataAxis | kTensorAxis}}) {
      auto group = MakeGroupCommunicator(**comm, *mesh, axes);
      for (size_t count : {size_t{1}, size_t{4099}})
        if (int rc = testing::CheckGroupCollectives(*group, *mesh, axes, count, DType::kBF16)) return rc;
    }
    return 0;
  });
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Two rings from one rendezvous (MakeTcpCommunicators), each used by a thread of its own at
// the same time, as ZeRO's collectives and the blocks' all-to-alls are: neither's bytes reach
// the other, 50 rounds each.
TEST(TcpRing, TwoRingsOfOneRendezvousServeTwoThreadsAtOnce) {
  constexpr int kN = 3;
  const int port = FreePort();
  auto codes = ForkRanks(kN, 30s, [&](int rank) {
    auto comms = MakeTcpCommunicators(Env(rank, kN, port), 5s, 2);
    if (!comms.ok()) return ChildFail(rank, comms.status().ToString());
    if (comms->size() != 2) return ChildFail(rank, "not two rings");
    int ring0 = 0, ring1 = 0;
    std::thread zero([&] {
      for (int round = 0; round < 50 && ring0 == 0; ++round) {
        std::vector<float> x(1001, static_cast<float>(rank + round));
        if (!(*comms)[0]->AllReduce(x.data(), x.size(), DType::kF32, ReduceOp::kSum).ok() ||
            x[1000] != static_cast<float>(3 + 3 * round))
          ring0 = ChildFail(rank, fmt::format("ring 0, round {}", round));
      }
    });
    for (int round = 0; round < 50 && ring1 == 0; ++round) {
      std::vector<float> send(kN * 7), got(kN * 7);
      for (int j = 0; j < kN * 7; ++j) send[j] = static_cast<float>(1000 * rank + j + round);
      if (!(*comms)[1]->AllToAll(send.data(), got.data(), 7, DType::kF32).ok() ||
          got[7 * (kN - 1)] != static_cast<float>(1000 * (kN - 1) + 7 * rank + round))
        ring1 = ChildFail(rank, fmt::format("ring 1, round {}", round));
    }
    zero.join();
    return ring0 ? ring0 : ring1;
  });
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpRingLarge, AllReduce64MiBTwoRanks) {
  constexpr int kN = 2;
  constexpr size_t kCount = (64u << 20) / sizeof(float);
  const int port = FreePort();
  auto codes = ForkRanks(kN, 30s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, kN, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    std::vector<float> data(kCount);
    double best = 1e9;
    for (int run = 0; run < 3; ++run) {
      for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>((i * 7 + rank) % 1024);
      const auto t0 = Clock::now();
      if (Status s = (*comm)->AllReduce(data.data(), kCount, DType::kF32, ReduceOp::kSum); !s.ok()) {
        return ChildFail(rank, s.ToString());
      }
      best = std::min(best, Seconds(t0));
      for (size_t i = 0; i < kCount; ++i) {
        if (data[i] != static_cast<float>((i * 7) % 1024 + (i * 7 + 1) % 1024)) {
          return ChildFail(rank, fmt::format("element {} = {}", i, data[i]));
        }
      }
    }
    if (rank == 0) {
      const double gb = kCount * sizeof(float) / 1e9;
      std::printf("[tcp ring] all-reduce 64 MiB fp32, %d ranks: best of 3 %.1f ms, algbw %.2f GB/s, busbw %.2f GB/s\n",
                  kN, best * 1e3, gb / best, gb / best * 2 * (kN - 1) / kN);
    }
    return 0;
  });
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Large pass-through: the middle rank forwards while it receives.
TEST(TcpRingLarge, BroadcastAndAllGather32MiBThreeRanks) {
  constexpr int kN = 3;
  constexpr size_t kCount = (32u << 20) / sizeof(float);
  const int port = FreePort();
  auto codes = ForkRanks(kN, 30s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, kN, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    std::vector<float> data(kCount, rank == 1 ? 3.5f : -1.0f);
    if (Status s = (*comm)->Broadcast(data.data(), kCount, DType::kF32, 1); !s.ok()) return ChildFail(rank, s.ToString());
    for (float x : data) {
      if (x != 3.5f) return ChildFail(rank, "broadcast mismatch");
    }
    std::vector<float> full(kN * kCount / 4);
    std::fill(full.begin() + rank * kCount / 4, full.begin() + (rank + 1) * kCount / 4, static_cast<float>(rank));
    if (Status s = (*comm)->AllGather(full.data() + rank * kCount / 4, full.data(), kCount / 4, DType::kF32); !s.ok()) {
      return ChildFail(rank, s.ToString());
    }
    for (size_t i = 0; i < full.size(); ++i) {
      if (full[i] != static_cast<float>(i / (kCount / 4))) return ChildFail(rank, "all-gather mismatch");
    }
    return 0;
  });
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Rank 1 exits right after joining; ranks 0 (its sender) and 2 (its receiver) must both
// fail their all-reduce with a Status naming rank 1, well within the 5 s timeout.
// The survivors stay alive until both have checked: here one rank dies and the others
// live on, whereas a survivor that exits would itself be a closed link to its neighbour.
TEST(TcpRingFaults, DeadPeerIsNamedNotAHang) {
  constexpr int kN = 3;
  const int port = FreePort();
  void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* checked = new (shared) std::atomic<int>(0);
  auto check = [&](int rank, Communicator& comm) {
    std::vector<float> data(1 << 20, 1.0f);
    const auto t0 = Clock::now();
    Status s = comm.AllReduce(data.data(), data.size(), DType::kF32, ReduceOp::kSum);
    const double took = Seconds(t0);
    if (s.ok()) return ChildFail(rank, "all-reduce succeeded without rank 1");
    if (s.message().find("all-reduce: rank 1 closed the connection (peer died?)") == std::string::npos) {
      return ChildFail(rank, "error does not name rank 1 and the operation: " + s.ToString());
    }
    if (took > 4.0) return ChildFail(rank, fmt::format("took {:.1f} s", took));
    // The communicator stays failed: later calls report the first error at once.
    Status again = comm.Barrier();
    if (again.ok() || again.message().find("rank 1") == std::string::npos) return ChildFail(rank, "barrier after failure: " + again.ToString());
    return 0;
  };
  auto codes = ForkRanks(kN, 20s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, kN, port), 5s);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    if (rank == 1) return 0;  // dies: its sockets close as the process exits
    const int rc = check(rank, **comm);
    checked->fetch_add(1);
    for (auto until = Clock::now() + 5s; checked->load() < 2 && Clock::now() < until;) std::this_thread::sleep_for(1ms);
    return rc;
  });
  munmap(shared, sizeof(std::atomic<int>));
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Rank 1 is alive but never joins the collective: rank 0 must give up after the timeout.
TEST(TcpRingFaults, HungPeerTimesOut) {
  constexpr int kN = 2;
  const int port = FreePort();
  auto codes = ForkRanks(kN, 20s, [&](int rank) {
    auto comm = MakeTcpCommunicator(Env(rank, kN, port), 1000ms);
    if (!comm.ok()) return ChildFail(rank, comm.status().ToString());
    if (rank == 1) {
      std::this_thread::sleep_for(3500ms);
      return 0;
    }
    float x = 1.0f;
    const auto t0 = Clock::now();
    Status s = (*comm)->AllReduce(&x, 1, DType::kF32, ReduceOp::kSum);
    const double took = Seconds(t0);
    if (s.ok()) return ChildFail(rank, "all-reduce succeeded without rank 1");
    if (s.message().find("timed out after 1000 ms waiting for data from rank 1") == std::string::npos) {
      return ChildFail(rank, "unexpected error: " + s.ToString());
    }
    // Not before the timeout; the upper bound leaves room for a loaded 2-core machine.
    if (took < 0.95 || took > 3.0) return ChildFail(rank, fmt::format("gave up after {:.2f} s", took));
    return 0;
  });
  for (int r = 0; r < kN; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Rank 0 of 2 alone: the rendezvous fails within its timeout with a Status, no exception.
TEST(TcpRingFaults, RendezvousTimesOutWhenARankNeverComes) {
  const int port = FreePort();
  auto codes = ForkRanks(1, 20s, [&](int) {
    const auto t0 = Clock::now();
    auto comm = MakeTcpCommunicator(Env(0, 2, port), 1000ms);
    const double took = Seconds(t0);
    if (comm.ok()) return ChildFail(0, "rendezvous succeeded alone");
    if (comm.status().message().find("rendezvous") == std::string::npos) return ChildFail(0, comm.status().ToString());
    if (took > 5.0) return ChildFail(0, fmt::format("gave up after {:.2f} s", took));
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
}

// Another program holds MASTER_PORT: it accepts and never answers. Rank 1 (a client of the
// store there) and rank 0 (who cannot serve on it) both give up within the timeout.
TEST(TcpRingFaults, ARogueProgramOnTheMasterPortIsATimeoutNotAHang) {
  const int port = FreePort();
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 16), 0);  // the kernel accepts for it; nobody ever reads
  for (int rank : {1, 0}) {
    auto codes = ForkRanks(1, 30s, [&](int) {
      const auto t0 = Clock::now();
      auto comm = MakeTcpCommunicator(Env(rank, 2, port), 1000ms);
      const double took = Seconds(t0);
      if (comm.ok()) return ChildFail(rank, "rendezvous succeeded with a rogue server");
      if (comm.status().message().find("rendezvous") == std::string::npos) return ChildFail(rank, comm.status().ToString());
      if (took > 5.0) return ChildFail(rank, fmt::format("gave up after {:.2f} s", took));
      return 0;
    });
    EXPECT_EQ(codes[0], 0) << "rank " << rank;
  }
  ::close(listener);
}

TEST(TcpRing, WorldOfOneIsTheSingleRankCommunicator) {
  auto comm = MakeTcpCommunicator(Env(0, 1, 1), 1000ms);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ((*comm)->world_size(), 1);
  float x = 2.0f;
  EXPECT_TRUE((*comm)->AllReduce(&x, 1, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(x, 2.0f);
}

}  // namespace
}  // namespace strata
