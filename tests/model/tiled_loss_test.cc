// Note [Tiled loss] (src/model/tiled_loss.cc): the head's loss a tile of tokens at a time
// equals the untiled LanguageModelLoss / MaskedLanguageModelLoss within fp32 rounding of it
// (relative 1e-6 on the loss, 1e-5 on the gradients of the hidden state, the final norm and
// the head's weight or the tied table), for GPT-2 (LayerNorm, tied), LLaMA (RMSNorm, untied)
// Qwen2-like (RMSNorm, tied, a vocabulary ten times the width) and Gemma 2 (its (1 + w) norm,
// tied, the logits soft-capped, which the tiled backward differentiates) heads, with and without a
// loss mask, at tiles of 1 token, an odd size, the whole micro-batch and more; in bf16 within
// bf16 rounding; and with every target masked, 0 and no gradient, as the untiled loss.
#include <gtest/gtest.h>

#include <vector>

#include "model/model_test_util.h"
#include "src/model/tiled_loss.h"

namespace strata::model {
namespace {

struct HeadCase {
  const char* name;
  Arch arch;
  bool tie;
  int64_t vocab;
  double softcap = 0;  // > 0: Gemma 2's head, its logits soft-capped
};

constexpr HeadCase kHeads[] = {
    {"gpt2_tied", Arch::kGpt2, true, 96},
    {"llama_untied", Arch::kLlama, false, 64},
    {"qwen2_like_tied", Arch::kLlama, true, 320},
    {"gemma2_softcapped_tied", Arch::kLlama, true, 128, 2.5},  // a cap the logits reach
};

// The loss and the gradients of everything it depends on.
struct LossAndGrads {
  double loss = 0;
  std::vector<torch::Tensor> grads;  // hidden, then the head's parameters, then the tied table
};

class TiledLoss : public ::testing::TestWithParam<int> {
 protected:
  // The head of a tiny model of `k`'s shape, in `dtype`, with its tied table bound if tied.
  void MakeHead(const HeadCase& k, torch::ScalarType dtype) {
    ModelConfig c = testing::Tiny(k.arch, k.tie);
    c.vocab_size = k.vocab;
    if (k.softcap > 0) {
      c.hf_model_type = "gemma2";
      c.gemma.final_softcap = k.softcap;
    }
    const ModelSpec spec(c);
    head_ = MakeBlock(spec, spec.num_blocks() - 1);
    head_->to(dtype);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    if (k.tie) {
      table_ = (torch::randn({k.vocab, c.d_model}, gen) * 0.05).to(dtype).requires_grad_(true);
      head_->BindTiedWeight(table_);
    }
    hidden0_ = (torch::randn({3, c.seq_len, c.d_model}, gen) * 2).to(dtype);
    targets_ = testing::Tokens(3, c.seq_len, k.vocab, 5);
    mask_ = testing::Tokens(3, c.seq_len, 3, 9) != 0;  // about two thirds unmasked
  }

  // chunk 0: the untiled loss.
  LossAndGrads Run(int64_t chunk, const torch::Tensor& mask) {
    for (auto& p : head_->parameters()) p.mutable_grad() = torch::Tensor();
    if (table_.defined()) table_.mutable_grad() = torch::Tensor();
    torch::Tensor h = hidden0_.clone().requires_grad_(true);
    torch::Tensor loss = chunk > 0  ? TiledLanguageModelLoss(head_->HeadHidden(h), head_->HeadWeight(), targets_, mask, chunk,
                                                             head_->LogitSoftcap())
                         : mask.defined() ? MaskedLanguageModelLoss(head_->Forward(h), targets_, mask)
                                          : LanguageModelLoss(head_->Forward(h), targets_);
    loss.backward();
    LossAndGrads r{loss.item<double>(), {h.grad()}};
    for (auto& p : head_->parameters()) r.grads.push_back(p.grad());
    if (table_.defined()) r.grads.push_back(table_.grad());
    return r;
  }

  std::shared_ptr<Block> head_;
  torch::Tensor table_, hidden0_, targets_, mask_;
};

TEST_P(TiledLoss, EqualsTheUntiledLossWithinFp32Rounding) {
  const HeadCase& k = kHeads[GetParam()];
  MakeHead(k, torch::kFloat32);
  const int64_t tokens = targets_.numel();
  for (bool masked : {false, true}) {
    const torch::Tensor mask = masked ? mask_ : torch::Tensor();
    const LossAndGrads want = Run(0, mask);
    for (int64_t chunk : {int64_t{1}, int64_t{7}, tokens, tokens + 5}) {
      SCOPED_TRACE(::testing::Message() << (masked ? "masked" : "unmasked") << ", tiles of " << chunk);
      const LossAndGrads got = Run(chunk, mask);
      EXPECT_LE(std::abs(got.loss - want.loss) / std::abs(want.loss), 1e-6) << got.loss << " vs " << want.loss;
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (size_t i = 0; i < want.grads.size(); ++i) {
        ASSERT_TRUE(got.grads[i].defined() && want.grads[i].defined()) << "gradient " << i;
        EXPECT_EQ(got.grads[i].scalar_type(), want.grads[i].scalar_type()) << "gradient " << i;
        EXPECT_LE(testing::NormRelativeError(got.grads[i], want.grads[i]), 1e-5) << "gradient " << i;
      }
    }
  }
}

TEST_P(TiledLoss, Bf16StaysWithinBf16RoundingOfTheUntiledLoss) {
  const HeadCase& k = kHeads[GetParam()];
  MakeHead(k, torch::kBFloat16);
  const LossAndGrads want = Run(0, mask_);
  const LossAndGrads got = Run(5, mask_);
  EXPECT_LE(std::abs(got.loss - want.loss) / std::abs(want.loss), 1e-3);
  for (size_t i = 0; i < want.grads.size(); ++i) EXPECT_LE(testing::NormRelativeError(got.grads[i], want.grads[i]), 2e-2) << i;
}

TEST_P(TiledLoss, EveryTargetMaskedGivesZeroAndNoGradient) {
  const HeadCase& k = kHeads[GetParam()];
  MakeHead(k, torch::kFloat32);
  const torch::Tensor none = torch::zeros_like(mask_);
  const LossAndGrads want = Run(0, none), got = Run(4, none);
  EXPECT_EQ(want.loss, 0.0);
  EXPECT_EQ(got.loss, 0.0);
  for (const torch::Tensor& g : got.grads) EXPECT_EQ(g.abs().max().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Heads, TiledLoss, ::testing::Range(0, static_cast<int>(std::size(kHeads))),
                         [](const auto& info) { return std::string(kHeads[info.param].name); });

}  // namespace
}  // namespace strata::model
