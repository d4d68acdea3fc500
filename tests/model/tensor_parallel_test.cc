// Note [Tensor parallel] (src/model/tensor_parallel.h): a whole model (GPT-2, LLaMA with
// grouped-query heads, Qwen2-shaped q/k/v biases) run by T ranks (threads with local
// communicators), each on its share of every layer's heads and MLP width, gives every rank
// the whole model's logits; each split projection's gradient is zero outside the rank's rows
// or columns; and the ranks' gradients summed and divided by T (as the engine's mean over the
// world counts them) are the whole model's. Also with a tiled MLP, composed with Ulysses on a
// mesh of tensor 2 x sequence 2, the tiled loss with the head split over the vocabulary,
// LoRA adapters on the split projections, and Gemma 2 / 3.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "model/model_test_util.h"
#include "src/model/model.h"
#include "src/model/tensor_parallel.h"
#include "src/model/tiled_loss.h"
#include "strata/process_mesh.h"

namespace strata::model {
namespace {

// The mean token loss of logits [B, n, V] against targets [B, n] over `count` tokens in all.
torch::Tensor TokenLossOver(const torch::Tensor& logits, const torch::Tensor& targets, int64_t count) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
         static_cast<double>(count);
}

// LoRA's B away from its zero start, the same in every copy: every adapter's gradients are
// then not zero (A's is zero while B is).
void StartAdaptersOff(FullModel& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters())
    if (p.key().find("lora_B") != std::string::npos)
      p.value().copy_(torch::arange(p.value().numel(), torch::kFloat32).reshape(p.value().sizes()).sin() * 0.1);
}

// `config` on one rank, and on a mesh of `tensor` x `sequence` ranks (each sequence rank its
// positions, Note [Ulysses]); `mlp_chunk`: tiled MLPs (Note [Tiled MLP]).
void ExpectSplitModelIsTheWholeModel(const ModelConfig& config, int tensor, int sequence = 1, int64_t mlp_chunk = 0) {
  const ModelSpec spec(config);
  const int64_t B = 2, T = config.seq_len, V = config.vocab_size, n = T / sequence;
  const torch::Tensor tokens = testing::Tokens(B, T + 1, V, 5);
  const torch::Tensor inputs = tokens.slice(1, 0, T), targets = tokens.slice(1, 1, T + 1);
  BlockContext plain;
  plain.mlp_chunk = mlp_chunk;
  FullModel whole(spec);
  StartAdaptersOff(whole);
  const torch::Tensor logits = whole.Forward(inputs, plain);
  TokenLossOver(logits, targets, B * T).backward();

  const int world = tensor * sequence;
  auto comms = MakeLocalCommunicators(world);
  std::vector<std::unique_ptr<Communicator>> tensor_groups, sequence_groups;
  std::vector<ProcessMesh> meshes;
  for (int r = 0; r < world; ++r) {
    meshes.push_back(*ProcessMesh::Make({1, tensor, sequence}, world, r));
    tensor_groups.push_back(MakeGroupCommunicator(*comms[r], meshes.back(), kTensorAxis));
    sequence_groups.push_back(sequence > 1 ? MakeGroupCommunicator(*comms[r], meshes.back(), kSequenceAxis) : nullptr);
  }
  std::vector<std::shared_ptr<FullModel>> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(std::make_shared<FullModel>(spec));  // the same weights (seeded)
    StartAdaptersOff(*models.back());
  }
  std::vector<torch::Tensor> rank_logits(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      const int64_t s = meshes[r].coord().sequence;
      BlockContext ctx = plain;
      ctx.tensor_group = tensor_groups[r].get();
      ctx.sequence_group = sequence_groups[r].get();
      ctx.sequence_offset = s * n;
      const torch::Tensor l = models[r]->Forward(inputs.slice(1, s * n, (s + 1) * n), ctx);
      TokenLossOver(l, targets.slice(1, s * n, (s + 1) * n), B * T).backward();
      rank_logits[r] = l.detach();
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    const int64_t s = meshes[r].coord().sequence;
    EXPECT_LT(testing::NormRelativeError(rank_logits[r], logits.detach().slice(1, s * n, (s + 1) * n)), 1e-6)
        << "rank " << r;
  }
  for (const auto& p : whole.named_parameters()) {
    torch::Tensor sum = torch::zeros_like(p.value());
    for (const auto& m : models) sum += m->named_parameters()[p.key()].grad();
    EXPECT_LT(testing::NormRelativeError(sum / static_cast<double>(tensor), p.value().grad()), 1e-5) << p.key();
  }
  // The split itself: rank t holds rows t·n/T .. of a column-parallel weight's gradient and
  // columns t·n/T .. of a row-parallel one's, zeros elsewhere.
  int checked = 0;
  for (const std::string& name : {std::string("1.mlp.down_proj.weight"), std::string("1.mlp.c_proj.weight")}) {
    for (int r = 0; r < world; ++r) {
      auto named = models[r]->named_parameters();
      if (!named.contains(name)) continue;
      ++checked;
      const torch::Tensor g = named[name].grad();
      const int64_t width = g.size(1) / tensor, t = meshes[r].coord().tensor;
      EXPECT_EQ(g.narrow(1, 0, t * width).abs().sum().item<double>(), 0) << name << " rank " << r;
      EXPECT_EQ(g.narrow(1, (t + 1) * width, g.size(1) - (t + 1) * width).abs().sum().item<double>(), 0)
          << name << " rank " << r;
      EXPECT_GT(g.narrow(1, t * width, width).abs().sum().item<double>(), 0) << name << " rank " << r;
    }
  }
  EXPECT_EQ(checked, world);
}

ModelConfig SplitLlama() {
  ModelConfig llama = testing::Tiny(Arch::kLlama, /*tie=*/false);
  llama.n_kv_head = 4;  // (a mesh of 4 needs 4 key/value heads)
  return llama;
}

TEST(TensorParallel, AModelOnShareOfItsHeadsAndWidthIsTheWholeModel) {
  for (int T : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << T << " ranks");
    { SCOPED_TRACE("gpt2"); ExpectSplitModelIsTheWholeModel(testing::Tiny(Arch::kGpt2), T); }
    { SCOPED_TRACE("llama"); ExpectSplitModelIsTheWholeModel(SplitLlama(), T); }
    ModelConfig qwen2 = SplitLlama();
    qwen2.hf_model_type = "qwen2";
    qwen2.qkv_bias = true;
    if (T == 2) qwen2.n_kv_head = 2;
    { SCOPED_TRACE("qwen2"); ExpectSplitModelIsTheWholeModel(qwen2, T); }
    ModelConfig qwen3 = SplitLlama();
    qwen3.hf_model_type = "qwen3";
    qwen3.qk_norm = true;
    { SCOPED_TRACE("qwen3"); ExpectSplitModelIsTheWholeModel(qwen3, T); }
  }
}

// LoRA on every projection: a column-parallel one's adapter adds B's rows of the share (A
// whole, its gradient here only the share's part), a row-parallel one's its part of the delta
// from A's columns (B whole), summed by the group with the rest.
TEST(TensorParallel, AdaptersOnSplitProjectionsAreTheWholeModels) {
  ModelConfig llama = SplitLlama();
  llama.lora.r = 4;
  llama.lora.alpha = 8;
  llama.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (int T : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << T << " ranks");
    ExpectSplitModelIsTheWholeModel(llama, T);
  }
  ExpectSplitModelIsTheWholeModel(llama, 2, 2);
}

// Gemma 2 (soft-capped attention with its own scale, GeGLU, four norms a layer) and Gemma 3
// (per-head q / k norms on a share of the heads, local RoPE on a sliding layer), with adapters.
TEST(TensorParallel, GemmaSplitsItsHeadsAndWidthAsTheLlamaFamilyDoes) {
  ModelConfig gemma2 = testing::Tiny(Arch::kLlama, /*tie=*/true);
  gemma2.n_kv_head = 4;
  gemma2.hf_model_type = "gemma2";
  gemma2.sliding_window = 32;
  gemma2.gemma = {24, 50, 30, 0, {true, false}};
  ModelConfig gemma3 = gemma2;
  gemma3.hf_model_type = "gemma3_text";
  gemma3.qk_norm = true;
  gemma3.gemma = {32, 0, 0, 10000, {true, false}};
  gemma3.lora.r = 4;
  gemma3.lora.target_modules = {"q_proj", "o_proj", "up_proj", "down_proj"};
  for (int T : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << T << " ranks");
    { SCOPED_TRACE("gemma2"); ExpectSplitModelIsTheWholeModel(gemma2, T); }
    { SCOPED_TRACE("gemma3"); ExpectSplitModelIsTheWholeModel(gemma3, T); }
  }
  { SCOPED_TRACE("gemma3, tiled MLP"); ExpectSplitModelIsTheWholeModel(gemma3, 2, 1, /*mlp_chunk=*/8); }
  { SCOPED_TRACE("gemma2, with Ulysses"); ExpectSplitModelIsTheWholeModel(gemma2, 2, 2); }
}

TEST(TensorParallel, TiledMlpsRunTheirAllReducesPerTileAgainInTheBackward) {
  ExpectSplitModelIsTheWholeModel(SplitLlama(), 2, 1, /*mlp_chunk=*/8);
  ExpectSplitModelIsTheWholeModel(testing::Tiny(Arch::kGpt2), 2, 1, /*mlp_chunk=*/8);
}

TEST(TensorParallel, ComposesWithUlyssesOnATensorTwoBySequenceTwoMesh) {
  ExpectSplitModelIsTheWholeModel(SplitLlama(), 2, 2);
  ExpectSplitModelIsTheWholeModel(testing::Tiny(Arch::kGpt2), 2, 2);
}

// The head split over the vocabulary (a vocabulary the group does not divide, with a loss
// mask and Gemma 2's soft-cap): every rank's loss and hidden gradient are the whole head's, and
// the ranks' weight gradients, each its own rows times T, sum to T times the whole one.
TEST(TensorParallel, TheTiledLossSplitsTheHeadOverTheVocabulary) {
  torch::manual_seed(3);
  const int64_t N = 24, C = 16, V = 67, chunk = 10;
  const torch::Tensor hidden0 = torch::randn({2, N / 2, C}), weight0 = torch::randn({V, C}) * 0.3;
  const torch::Tensor targets = torch::randint(V, {2, N / 2}, torch::kInt64);
  const torch::Tensor mask = torch::rand({2, N / 2}) > 0.3;
  for (double softcap : {0.0, 5.0}) {
    for (int T : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << T << " ranks, soft-cap " << softcap);
      torch::Tensor h = hidden0.clone().requires_grad_(true), w = weight0.clone().requires_grad_(true);
      const torch::Tensor whole = TiledLanguageModelLoss(h, w, targets, mask, chunk, softcap);
      whole.backward();
      auto comms = MakeLocalCommunicators(T);
      std::vector<torch::Tensor> losses(T), hidden_grads(T), weight_grads(T);
      std::vector<std::thread> ranks;
      for (int r = 0; r < T; ++r)
        ranks.emplace_back([&, r] {
          torch::Tensor hr = hidden0.clone().requires_grad_(true), wr = weight0.clone().requires_grad_(true);
          losses[r] = TiledLanguageModelLoss(hr, wr, targets, mask, chunk, softcap, comms[r].get());
          losses[r].backward();
          hidden_grads[r] = hr.grad();
          weight_grads[r] = wr.grad();
        });
      for (auto& t : ranks) t.join();
      torch::Tensor sum = torch::zeros_like(weight0);
      for (int r = 0; r < T; ++r) {
        EXPECT_LT(testing::NormRelativeError(losses[r].detach(), whole.detach()), 1e-6) << "rank " << r;
        EXPECT_LT(testing::NormRelativeError(hidden_grads[r], h.grad()), 1e-6) << "rank " << r;
        const int64_t each = (V + T - 1) / T, first = r * each, rows = std::min(each, V - first);
        EXPECT_EQ(weight_grads[r].narrow(0, 0, first).abs().sum().item<double>(), 0) << "rank " << r;
        EXPECT_EQ(weight_grads[r].narrow(0, first + rows, V - first - rows).abs().sum().item<double>(), 0) << "rank " << r;
        sum += weight_grads[r];
      }
      EXPECT_LT(testing::NormRelativeError(sum / static_cast<double>(T), w.grad()), 1e-5);
    }
  }
}

}  // namespace
}  // namespace strata::model
