// Note [Packed sequences]: examples packed into one row never see each other. For GPT-2
// (learned positions) and LLaMA (RoPE, grouped-query attention): changing one example's
// tokens leaves every other example's logits and loss, and the gradients they send to the
// weights, bitwise unchanged; an example's logits equal those of it alone in a row of its
// own (positions restart); the loss of the packed batch is the per-example losses combined.
#include <gtest/gtest.h>

#include <vector>

#include "model/model_test_util.h"
#include "src/model/model.h"
#include "src/model/packed_sequences.h"

namespace strata::model {
namespace {

struct Packed {
  torch::Tensor tokens, positions;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> examples;  // per row: (start, length)
};

// Two rows of 16: [5 | 7 | 4], [9 | 3 | padding 4], the padding its own run of positions.
Packed MakePacked(uint64_t seed) {
  Packed p;
  p.tokens = testing::Tokens(2, 16, 64, seed);
  p.examples = {{{0, 5}, {5, 7}, {12, 4}}, {{0, 9}, {9, 3}, {12, 4}}};
  p.positions = torch::empty({2, 16}, torch::kInt64);
  for (int64_t r = 0; r < 2; ++r)
    for (const auto& [start, length] : p.examples[r])
      for (int64_t j = 0; j < length; ++j) p.positions[r][start + j] = j;
  return p;
}

torch::Tensor PackedLogits(FullModel& m, const Packed& p) {
  const auto layout = PackedLayout::Of(p.positions);
  return m.Forward(p.tokens, BlockContext{.packing = layout.get()});
}

class PackedSequences : public ::testing::TestWithParam<Arch> {};

TEST_P(PackedSequences, OtherExamplesAreBitwiseUnchangedAndPositionsRestart) {
  FullModel m(ModelSpec(testing::Tiny(GetParam())));
  torch::NoGradGuard no_grad;
  const Packed p = MakePacked(11);
  const torch::Tensor logits = PackedLogits(m, p);
  // Example (0, 1) of 7 tokens changed: every other example's logits stay bit for bit.
  Packed changed = p;
  changed.tokens = p.tokens.clone();
  changed.tokens[0].narrow(0, 5, 7).copy_(testing::Tokens(1, 7, 64, 99)[0]);
  const torch::Tensor after = PackedLogits(m, changed);
  for (int64_t r = 0; r < 2; ++r)
    for (const auto& [start, length] : p.examples[r]) {
      const bool same = !(r == 0 && start == 5);
      EXPECT_EQ(torch::equal(after[r].narrow(0, start, length), logits[r].narrow(0, start, length)), same)
          << "row " << r << " example at " << start;
    }
  // Each example alone, in a row of its own from position 0 (no layout): the same logits.
  for (int64_t r = 0; r < 2; ++r)
    for (const auto& [start, length] : p.examples[r]) {
      const torch::Tensor alone = m.Forward(p.tokens[r].narrow(0, start, length).unsqueeze(0))[0];
      EXPECT_LE(testing::NormRelativeError(logits[r].narrow(0, start, length), alone), 1e-6)
          << "row " << r << " example at " << start;
    }
}

TEST_P(PackedSequences, GradientsOfOneExampleIgnoreTheOthers) {
  // The loss of example (1, 0) alone: its weight gradients do not depend on the other examples.
  auto grads_of_first_example = [&](const Packed& p) {
    FullModel m(ModelSpec(testing::Tiny(GetParam())));
    const auto layout = PackedLayout::Of(p.positions);
    torch::Tensor logits = m.Forward(p.tokens, BlockContext{.packing = layout.get()});
    torch::Tensor mask = torch::zeros({2, 16}, torch::kBool);
    mask[1].narrow(0, 0, 8).fill_(true);  // its 8 targets inside the example (the 9th token is the last input)
    torch::Tensor targets = p.tokens.roll(-1, 1);
    MaskedLanguageModelLoss(logits, targets, mask).backward();
    std::vector<torch::Tensor> g;
    for (const auto& param : m.parameters())
      if (param.grad().defined()) g.push_back(param.grad().clone());
    return g;
  };
  const Packed p = MakePacked(5);
  Packed changed = p;
  changed.tokens = p.tokens.clone();
  changed.tokens[0].copy_(testing::Tokens(1, 16, 64, 77)[0]);           // every example of row 0
  changed.tokens[1].narrow(0, 9, 7).copy_(testing::Tokens(1, 7, 64, 78)[0]);  // and those after it in row 1
  const auto want = grads_of_first_example(p), got = grads_of_first_example(changed);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << "parameter " << i;
}

TEST_P(PackedSequences, UnarmedIsPlainCausalAttention) {
  FullModel m(ModelSpec(testing::Tiny(GetParam())));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = testing::Tokens(2, 16, 64, 3);
  const torch::Tensor plain = m.Forward(tokens);
  const auto none = PackedLayout::Of(torch::Tensor());  // undefined positions: no layout
  EXPECT_EQ(none, nullptr);
  EXPECT_TRUE(torch::equal(m.Forward(tokens, BlockContext{.packing = none.get()}), plain));
  // One example a row over the whole row: the plain rows' values.
  const auto whole = PackedLayout::Of(torch::arange(16, torch::kInt64).repeat({2, 1}));
  EXPECT_LE(testing::NormRelativeError(m.Forward(tokens, BlockContext{.packing = whole.get()}), plain), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Archs, PackedSequences, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& info) { return info.param == Arch::kGpt2 ? "Gpt2" : "Llama"; });

}  // namespace
}  // namespace strata::model
