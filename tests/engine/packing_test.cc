// Packed examples in the engine (Note [Examples], Note [Packed sequences]): a prompt/completion
// set packed into rows trains as a plain LibTorch loop that arms the same packing over the
// same rows (2 ranks x 2 micro-batches, recomputed blocks with their inputs on NVMe, both
// schedules, fused micro-batches); on the fake asynchronous device it is bitwise the host.
#include <gtest/gtest.h>

#include <random>

#include "src/model/model.h"
#include "src/model/packed_sequences.h"
#include "tests/engine/engine_test_util.h"
#include "support/settled.h"

namespace strata {
namespace {

using testing::RunEngine;
using testing::RunResult;
using testing::TempDir;

// Examples of a prompt (3..20 tokens, untrained) and a completion (2..14, trained), with the
// token file's mask and examples files; some longer than a row of 32 are split.
std::string WriteExamples(const std::string& dir) {
  std::mt19937 rng(23);
  std::string tokens, mask, starts;
  int64_t at = 0;
  for (int e = 0; e < 120; ++e) {
    const int prompt = 3 + static_cast<int>(rng() % 18), completion = 2 + static_cast<int>(rng() % 13);
    for (int i = 0; i < 8; ++i) starts.push_back(static_cast<char>((static_cast<uint64_t>(at) >> (8 * i)) & 0xFF));
    for (int i = 0; i < prompt + completion; ++i) {
      const auto t = static_cast<uint16_t>(1 + rng() % 255);
      tokens.push_back(static_cast<char>(t & 0xFF));
      tokens.push_back(static_cast<char>(t >> 8));
      mask.push_back(i >= prompt ? 1 : 0);
    }
    at += prompt + completion;
  }
  const std::string path = dir + "/sft.u16";
  testing::WriteBytes(path, tokens);
  testing::WriteBytes(path + ".mask", mask);
  testing::WriteBytes(path + ".examples", starts);
  return path;
}

TrainConfig PackedLlama(const std::string& dir, StepSchedule schedule) {
  TrainConfig c = testing::RecomputedLlama(dir, schedule);
  c.micro_batch = 2;
  c.block_inputs = BlockInputsAt::kNvme;
  c.no_decay = std::vector<std::string>{};  // the reference decays every parameter
  c.data.path = WriteExamples(dir);
  c.data.packing = data::Packing::kPacked;
  c.data.eval_fraction = 0.1;
  return c;
}

// The plain loop: the step's 4 batches (micro-batch g of rank r reads index (2s + g) * 2 + r),
// each through the whole model with its packing armed, the masked mean over all of them.
std::vector<double> ReferenceLosses(const TrainConfig& c, int64_t steps, model::FullModel* ref) {
  auto data = data::TokenDataset::Open(c.data, c.model.vocab_size, c.model.seq_len);
  EXPECT_TRUE(data.ok()) << data.status().ToString();
  torch::optim::AdamW opt(ref->parameters(), torch::optim::AdamWOptions(c.lr)
                                                 .betas({c.beta1, c.beta2})
                                                 .eps(c.eps)
                                                 .weight_decay(c.weight_decay));
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    torch::Tensor ce_sum = torch::zeros({}, torch::kFloat32);
    int64_t trained = 0;
    for (int k = 0; k < 4; ++k) {
      data::Batch b = (*data)->Get(data::Split::kTrain, static_cast<uint64_t>(4 * s + k), c.micro_batch);
      EXPECT_TRUE(b.positions.defined());
      const auto packed = model::PackedLayout::Of(b.positions);
      torch::Tensor logits = ref->Forward(b.inputs, model::BlockContext{.packing = packed.get()});
      torch::Tensor ce = torch::nn::functional::cross_entropy(
          logits.reshape({-1, c.model.vocab_size}), b.targets.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      ce_sum = ce_sum + (ce * b.loss_mask.reshape({-1}).to(torch::kFloat32)).sum();
      trained += b.loss_mask.sum().item<int64_t>();
    }
    torch::Tensor loss = ce_sum / static_cast<double>(trained);
    losses.push_back(loss.item<double>());
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(ref->parameters(), c.gradient_clipping);
    opt.step();
  }
  return losses;
}

double WorstWeight(const model::FullModel& ref, const RunResult& run) {
  double worst = 0;
  for (size_t b = 0; b < ref.blocks().size(); ++b) {
    auto params = ref.blocks()[b]->named_parameters();
    EXPECT_EQ(params.size(), run.master[b].size());
    for (size_t i = 0; i < params.size() && i < run.master[b].size(); ++i)
      worst = std::max(worst, (params[i].value().detach() - run.master[b][i].second).abs().max().item<double>());
  }
  return worst;
}

TEST(PackedExamples, TrainAsThePlainLoopWithTheSamePacking) {
  constexpr int64_t kSteps = 3;
  for (StepSchedule schedule : {StepSchedule::kMicroBatch, StepSchedule::kLayerMajor}) {
    for (bool fused : {false, true}) {
      if (fused && schedule == StepSchedule::kMicroBatch) continue;
      SCOPED_TRACE(::testing::Message() << StepScheduleName(schedule) << (fused ? ", fused" : ""));
      TempDir dir;
      TrainConfig c = PackedLlama(dir.path(), schedule);
      c.fuse_micro_batches = fused;
      const RunResult run = RunEngine(c, 2, kSteps);
      ASSERT_EQ(run.stats.size(), static_cast<size_t>(kSteps));
      model::FullModel ref{model::ModelSpec(c.model)};
      const std::vector<double> want = ReferenceLosses(c, kSteps, &ref);
      for (int64_t s = 0; s < kSteps; ++s) EXPECT_NEAR(run.stats[s].loss, want[s], 1e-5) << "step " << s;
      EXPECT_LT(WorstWeight(ref, run), 2e-5);
      EXPECT_LT(run.stats[2].loss, run.stats[0].loss);
    }
  }
}

TEST(PackedExamples, TheFakeAsynchronousDeviceIsBitwiseTheHost) {
  TempDir dir;
  const TrainConfig c = PackedLlama(dir.path(), StepSchedule::kLayerMajor);
  const RunResult host = RunEngine(c, 2, 3);
  for (uint64_t seed : {1, 2}) {
    const FakeDeviceOptions fake{.seed = seed, .max_delay_us = 1500};
    testing::ExpectSameRun(host, RunEngine(c, 2, 3, &fake), 3);
  }
}

}  // namespace
}  // namespace strata
