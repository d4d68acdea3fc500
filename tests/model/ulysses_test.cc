// Note [Ulysses] (src/model/ulysses.h): attention over a sequence split across S ranks
// (threads with local communicators), with its two all-to-alls, gives each rank its positions
// of the whole-row attention, and the gradients of its positions of q, k and v, as one rank
// attending over the whole row computes them: plain and grouped-query heads, S = 2 and 4.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "src/model/layers.h"
#include "src/model/ulysses.h"

namespace strata::model {
namespace {

struct UlyssesResult {
  torch::Tensor y, q, k, v;  // output [B, H, T, D] and the inputs' gradients
};

// Whole-row causal attention, y weighted by w summed, and its gradients.
UlyssesResult Whole(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0, const torch::Tensor& w) {
  torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                v = v0.clone().requires_grad_(true);
  torch::Tensor y = detail::Attend(q, k, v, std::nullopt, /*causal=*/true);
  (y * w).sum().backward();
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

// Positions [s·T/S, (s+1)·T/S) of x [B, H, T, D].
torch::Tensor PositionShard(const torch::Tensor& x, int64_t s, int64_t S) {
  const int64_t n = x.size(2) / S;
  return x.slice(2, s * n, (s + 1) * n).contiguous();
}

TEST(Ulysses, ShardedAttentionGivesEachRankItsPositionsOfTheWholeRowAndGradients) {
  torch::manual_seed(11);
  for (auto [S, kv] : {std::pair<int64_t, int64_t>{2, 4}, {2, 2}, {4, 4}, {4, 8}}) {
    SCOPED_TRACE(::testing::Message() << S << " ranks, " << kv << " key/value heads of 8");
    const int64_t B = 2, H = 8, T = 32, D = 16;
    const torch::Tensor q = torch::randn({B, H, T, D}), k = torch::randn({B, kv, T, D}),
                        v = torch::randn({B, kv, T, D}), w = torch::randn({B, H, T, D});
    const UlyssesResult whole = Whole(q, k, v, w);
    auto comms = MakeLocalCommunicators(static_cast<int>(S));
    std::vector<UlyssesResult> shards(static_cast<size_t>(S));
    std::vector<std::thread> ranks;
    for (int64_t s = 0; s < S; ++s)
      ranks.emplace_back([&, s] {
        Communicator& group = *comms[static_cast<size_t>(s)];
        torch::Tensor qs = PositionShard(q, s, S).requires_grad_(true), ks = PositionShard(k, s, S).requires_grad_(true),
                      vs = PositionShard(v, s, S).requires_grad_(true);
        const torch::Tensor heads = detail::Attend(SequenceToHeads(qs, group), SequenceToHeads(ks, group),
                                                   SequenceToHeads(vs, group), std::nullopt, /*causal=*/true);
        EXPECT_EQ(heads.sizes(), (std::vector<int64_t>{B, H / S, T, D}));
        const torch::Tensor y = HeadsToSequence(heads, group);
        (y * PositionShard(w, s, S)).sum().backward();
        shards[static_cast<size_t>(s)] = {y.detach(), qs.grad(), ks.grad(), vs.grad()};
      });
    for (auto& t : ranks) t.join();
    for (int64_t s = 0; s < S; ++s) {
      const UlyssesResult& a = shards[static_cast<size_t>(s)];
      // Each head is the same computation on the same whole row as on one rank.
      EXPECT_TRUE(torch::equal(a.y, PositionShard(whole.y, s, S))) << "rank " << s;
      EXPECT_TRUE(torch::equal(a.q, PositionShard(whole.q, s, S))) << "rank " << s;
      EXPECT_TRUE(torch::allclose(a.k, PositionShard(whole.k, s, S), 1e-6, 1e-6)) << "rank " << s;
      EXPECT_TRUE(torch::allclose(a.v, PositionShard(whole.v, s, S), 1e-6, 1e-6)) << "rank " << s;
    }
  }
}

// A communicator whose exchange fails: the error reaches the caller as an exception naming it
// (the engine's TorchCall turns it into a Status), never a wrong tensor.
class FailingGroup final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  const char* name() const override { return "failing"; }
  Status AllGather(const void*, void*, size_t, DType) override { return Error(StatusCode::kIoError, "peer 1 died"); }
  Status ReduceScatter(const void*, void*, size_t, DType, ReduceOp) override { return Status(); }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Status(); }
  Status Broadcast(void*, size_t, DType, int) override { return Status(); }
  Status Barrier() override { return Status(); }
};

TEST(Ulysses, AFailedExchangeIsAnErrorNamingItAndAHeadCountThatDoesNotSplitIsRefused) {
  FailingGroup group;
  try {
    SequenceToHeads(torch::zeros({1, 4, 3, 2}), group);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sequence to heads"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer 1 died"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SequenceToHeads(torch::zeros({1, 3, 3, 2}), group), std::invalid_argument);
  EXPECT_THROW(HeadsToSequence(torch::zeros({1, 2, 3, 2}), group), std::invalid_argument);
}

}  // namespace
}  // namespace strata::model
