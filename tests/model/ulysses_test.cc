// Note [Ulysses] (src/model/ulysses.h): attention over a sequence split across S ranks
// (threads with local communicators), with its two all-to-alls, gives each rank its positions
// of the whole-row attention, and the gradients of its positions of q, k and v, as one rank
// attending over the whole row computes them: plain and grouped-query heads, S = 2 and 4. A
// whole model (GPT-2, LLaMA with grouped-query heads, Qwen2-shaped q/k/v biases) run on
// position shards gives the whole model's logits, and its weights' gradients summed over the
// ranks.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "model/model_test_util.h"
#include "src/model/layers.h"
#include "src/model/model.h"
#include "src/model/packed_sequences.h"
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

// `config` on one rank over [B, T] tokens and on S ranks over T / S positions each: logits,
// and the gradients of the mean token loss over the whole batch (each rank's share: its
// positions' losses over the whole count, so that the ranks' gradients sum to the whole one).
// `positions` (int64 [2, T], optional): packed examples (Note [Packed sequences]), the whole
// rows' layout on every rank.
void ExpectShardedModelIsTheWholeModel(const ModelConfig& config, int64_t S, const torch::Tensor& positions = {}) {
  const ModelSpec spec(config);
  const int64_t B = 2, T = config.seq_len, V = config.vocab_size;
  const torch::Tensor tokens = testing::Tokens(B, T + 1, V, 5);
  const torch::Tensor inputs = tokens.slice(1, 0, T), targets = tokens.slice(1, 1, T + 1);
  auto loss_of = [&](const torch::Tensor& logits, const torch::Tensor& t) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, V}), t.reshape({-1}),
                                                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
           static_cast<double>(B * T);
  };
  const std::shared_ptr<const PackedLayout> layout = PackedLayout::Of(positions);
  BlockContext plain;
  plain.packing = layout.get();
  FullModel whole(spec);
  const torch::Tensor logits = whole.Forward(inputs, plain);
  loss_of(logits, targets).backward();
  auto comms = MakeLocalCommunicators(static_cast<int>(S));
  std::vector<torch::Tensor> shard_logits(static_cast<size_t>(S));
  std::vector<std::shared_ptr<FullModel>> models;
  for (int64_t s = 0; s < S; ++s) models.push_back(std::make_shared<FullModel>(spec));  // the same weights (seeded)
  std::vector<std::thread> ranks;
  const int64_t n = T / S;
  for (int64_t s = 0; s < S; ++s)
    ranks.emplace_back([&, s] {
      BlockContext ctx = plain;
      ctx.sequence_group = comms[static_cast<size_t>(s)].get();
      ctx.sequence_offset = s * n;
      const torch::Tensor l = models[static_cast<size_t>(s)]->Forward(inputs.slice(1, s * n, (s + 1) * n), ctx);
      loss_of(l, targets.slice(1, s * n, (s + 1) * n)).backward();
      shard_logits[static_cast<size_t>(s)] = l.detach();
    });
  for (auto& t : ranks) t.join();
  EXPECT_LT(testing::NormRelativeError(torch::cat(shard_logits, 1), logits.detach()), 1e-6);
  auto named = whole.named_parameters();
  for (const auto& p : named) {
    torch::Tensor sum = torch::zeros_like(p.value());
    for (const auto& m : models) sum += m->named_parameters()[p.key()].grad();
    EXPECT_LT(testing::NormRelativeError(sum, p.value().grad()), 1e-5) << p.key();
  }
}

TEST(Ulysses, AModelOnPositionShardsIsTheWholeModel) {
  for (int64_t S : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << S << " ranks");
    { SCOPED_TRACE("gpt2"); ExpectShardedModelIsTheWholeModel(testing::Tiny(Arch::kGpt2), S); }
    ModelConfig llama = testing::Tiny(Arch::kLlama, /*tie=*/false);
    llama.n_kv_head = 4;  // (a group of 4 needs 4 key/value heads)
    { SCOPED_TRACE("llama"); ExpectShardedModelIsTheWholeModel(llama, S); }
    ModelConfig qwen2 = llama;
    qwen2.hf_model_type = "qwen2";
    qwen2.qkv_bias = true;
    if (S == 2) qwen2.n_kv_head = 2;
    { SCOPED_TRACE("qwen2"); ExpectShardedModelIsTheWholeModel(qwen2, S); }
    // Gemma's soft-capped attention with its own scale, local RoPE on a sliding layer (the rows
    // within the window), and Gemma 3's q/k norms.
    ModelConfig gemma2 = testing::Tiny(Arch::kLlama, /*tie=*/true);
    gemma2.n_kv_head = 4;
    gemma2.hf_model_type = "gemma2";
    gemma2.sliding_window = 32;
    gemma2.gemma = {24, 50, 30, 0, {true, false}};
    { SCOPED_TRACE("gemma2"); ExpectShardedModelIsTheWholeModel(gemma2, S); }
    ModelConfig gemma3 = gemma2;
    gemma3.hf_model_type = "gemma3_text";
    gemma3.qk_norm = true;
    gemma3.gemma = {32, 0, 0, 10000, {true, false}};
    { SCOPED_TRACE("gemma3"); ExpectShardedModelIsTheWholeModel(gemma3, S); }
  }
}

// Packed examples whose boundaries fall inside shards and across them: each attends within
// itself over the whole row, at its own positions, on every rank.
TEST(Ulysses, PackedExamplesSplitAcrossShardsAttendWithinThemselves) {
  auto positions_of = [](std::vector<std::vector<int64_t>> rows) {
    std::vector<int64_t> flat;
    for (const auto& lengths : rows)
      for (int64_t n : lengths)
        for (int64_t p = 0; p < n; ++p) flat.push_back(p);
    return torch::tensor(flat, torch::kInt64).reshape({static_cast<int64_t>(rows.size()), -1});
  };
  const torch::Tensor positions = positions_of({{5, 7, 4}, {3, 13}});  // T = 16
  for (int64_t S : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << S << " ranks");
    { SCOPED_TRACE("gpt2"); ExpectShardedModelIsTheWholeModel(testing::Tiny(Arch::kGpt2), S, positions); }
    ModelConfig llama = testing::Tiny(Arch::kLlama, /*tie=*/false);
    llama.n_kv_head = 4;
    { SCOPED_TRACE("llama"); ExpectShardedModelIsTheWholeModel(llama, S, positions); }
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

// DPO's rows over a sequence group (Note [DPO]): each member's per-row partial sums become the
// whole rows' sums on every member, and a loss of them flows back to each member times S (the
// world's mean over the S members then counts each row once).
TEST(Ulysses, RowTotalsAreTheGroupsSumsAndTheirGradientCountsEachRowOnce) {
  constexpr int S = 3;
  auto comms = MakeLocalCommunicators(S);
  std::vector<torch::Tensor> totals(S), grads(S);
  std::vector<std::thread> ranks;
  for (int r = 0; r < S; ++r) {
    ranks.emplace_back([&, r] {
      torch::Tensor partial = torch::tensor({1.0f + r, -2.0f * r}).requires_grad_(true);
      totals[r] = RowTotalsOverGroup(partial, *comms[r]);
      (totals[r] * torch::tensor({0.5f, 2.0f})).sum().backward();
      grads[r] = partial.grad();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < S; ++r) {
    EXPECT_TRUE(torch::equal(totals[r].detach(), torch::tensor({6.0f, -6.0f}))) << totals[r];
    EXPECT_TRUE(torch::equal(grads[r], torch::tensor({0.5f * S, 2.0f * S}))) << grads[r];
  }
}

}  // namespace
}  // namespace strata::model
