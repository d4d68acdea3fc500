// Ulysses sequence parallelism end to end (Note [Ulysses]): `train --nproc 2` with
// sequence_parallel_size 2 (one data rank, each row's positions split over both ranks) against
// the data-parallel run of the same global batch (2 data ranks of half the micro-batch):
// GPT-2, LLaMA (grouped-query heads) and Qwen2-shaped models, fp32, parameters and optimizer
// states on NVMe, 20 steps, every step's loss within 1e-6 relative; a checkpoint written split
// resumes as data parallel with the uninterrupted run's losses; a loss mask (each rank's
// positions weighed by their own trained targets) and packed examples (attending within
// themselves over whole rows) give the data-parallel losses and evaluation losses too; and
// what is not split yet is refused at start-up by name.
#include <gtest/gtest.h>

#include <string>

#include "cli/parallel_runs.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::ExpectSameLosses;
using testing::Family;
using testing::Losses;
using testing::MaskedTokens;
using testing::RunStrata;
using testing::Train;

constexpr const char* kSplit = "--set sequence_parallel_size=2 --set train_micro_batch_size_per_gpu=4";
constexpr const char* kData = "--set train_micro_batch_size_per_gpu=2";

class SequenceParallel : public ::testing::TestWithParam<Family> {};

TEST_P(SequenceParallel, LossesAreTheDataParallelRunsAndACheckpointResumesAsDataParallel) {
  testing::TempDir dir;
  testing::ExpectSplitTrainsAsDataParallelAndResumesAsIt(
      dir.path(), GetParam().model, kSplit, kData, "1 data rank(s), each row's positions split over 2 ranks (Ulysses)");
}

INSTANTIATE_TEST_SUITE_P(
    Cli, SequenceParallel,
    testing::ParallelFamilies(),
    [](const auto& info) { return std::string(info.param.name); });

// Four ranks as data 2 x sequence 2 (each pair of neighbours one group, reading its own
// micro-batches) train as four data ranks with the same global batch.
TEST(SequenceParallelMesh, DataTwoBySequenceTwoIsDataFour) {
  testing::TempDir dir;
  const std::string model = "--set strata.model.arch=llama --set strata.model.n_kv_head=2";
  const std::string mesh = dir.path() + "/mesh.jsonl", data = dir.path() + "/data.jsonl";
  std::string run = Train(dir.path(), model, kSplit, 10, "--metrics " + mesh + " --set train_micro_batch_size_per_gpu=2");
  run.replace(run.find("--nproc 2"), 9, "--nproc 4");
  auto r = RunStrata(run);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("2 data rank(s), each row's positions split over 2 ranks"), std::string::npos) << r.out;
  run = Train(dir.path(), model, "--set train_micro_batch_size_per_gpu=1", 10, "--metrics " + data);
  run.replace(run.find("--nproc 2"), 9, "--nproc 4");
  r = RunStrata(run);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(data).size(), 10u);
  ExpectSameLosses(Losses(mesh), Losses(data));
}

TEST(SequenceParallelData, ALossMaskAndPackedExamplesKeepTheirMeaningAcrossShards) {
  testing::TempDir dir;
  const std::string data_file = MaskedTokens(dir.path());
  const std::string model = "--set strata.model.arch=llama --set strata.model.n_kv_head=2 "
                            "--set strata.model.vocab_size=256 --set strata.data.path=" + data_file;
  const std::string eval = "--set strata.eval_interval=5 --set strata.eval_batches=2 ";
  const std::string split = dir.path() + "/split.jsonl", data = dir.path() + "/data.jsonl";
  auto r = RunStrata(Train(dir.path(), model, kSplit, 10, "--metrics " + split) + " " + eval);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunStrata(Train(dir.path(), model, kData, 10, "--metrics " + data) + " " + eval);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(data).size(), 10u);
  ExpectSameLosses(Losses(split), Losses(data));
  ASSERT_EQ(Losses(data, "eval_loss").size(), 3u);
  ExpectSameLosses(Losses(split, "eval_loss"), Losses(data, "eval_loss"));
  // Packed examples, their boundaries anywhere in a row: each attends within itself.
  const std::string packed = " --set strata.data.packing=packed";
  r = RunStrata(Train(dir.path(), model + packed, kSplit, 10, "--metrics " + split + ".packed"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunStrata(Train(dir.path(), model + packed, kData, 10, "--metrics " + data + ".packed"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(data + ".packed").size(), 10u);
  ExpectSameLosses(Losses(split + ".packed"), Losses(data + ".packed"));
}

// `model` split over 2 ranks (micro-batch 4) trains as one rank with the same 4 rows: 10
// steps' losses within 1e-6. For what a split run must draw or sum as the whole rows do.
void ExpectSplitTrainsAsOneRank(const std::string& model) {
  testing::TempDir dir;
  const std::string split = dir.path() + "/split.jsonl", one = dir.path() + "/one.jsonl";
  auto r = RunStrata(Train(dir.path(), model, kSplit, 10, "--metrics " + split));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string alone = Train(dir.path(), model, "--set train_micro_batch_size_per_gpu=4", 10, "--metrics " + one);
  alone.replace(alone.find("--nproc 2"), 9, "--nproc 1");
  r = RunStrata(alone);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(one).size(), 10u);
  ExpectSameLosses(Losses(split), Losses(one));
}

// LoRA with dropout: each rank draws the whole rows' masks and applies its positions' part.
TEST(SequenceParallelLora, DropoutMasksAreTheUnsplitRunsPositionByPosition) {
  ExpectSplitTrainsAsOneRank("--set strata.model.arch=llama --set strata.model.n_kv_head=2 --set strata.lora.r=4 "
                             "--set strata.lora.alpha=8 --set strata.lora.dropout=0.2 "
                             "--set 'strata.lora.target_modules=[\"q_proj\",\"v_proj\",\"down_proj\"]'");
}

// A mixture of experts with its load-balancing loss: each rank's counts and sums are the
// group's before the loss, and its gradient to its own rows scaled by the group's size (the
// experts fetched as each shard's tokens chose them).
TEST(SequenceParallelExperts, TheLoadBalancingLossIsTheUnsplitRowsOne) {
  ExpectSplitTrainsAsOneRank("--set strata.model.arch=llama --set strata.model.n_kv_head=2 "
                             "--set strata.model.hf_model_type=qwen3_moe --set strata.model.qk_norm=true "
                             "--set 'strata.model.moe={\"num_experts\":4,\"top_k\":2,\"expert_ffn\":32,"
                             "\"aux_loss_coef\":0.05}'");
}

TEST(SequenceParallelRefusals, WhatIsNotSplitYetIsRefusedAtStartUpNamingIt) {
  testing::TempDir dir;
  const struct {
    const char* layout;
    const char* says;
  } cases[] = {
      {"--set sequence_parallel_size=3", "sequence_parallel_size 3: the world of 2 rank(s) does not split into groups of 3"},
      {"--set sequence_parallel_size=2 --set strata.model.arch=llama --set strata.model.n_kv_head=1",
       "do not split over 2 ranks"},
      {"--set sequence_parallel_size=2 --set strata.model.seq_len=33", "seq_len 33 does not split into 2 equal shards"},
  };
  for (const auto& c : cases) {
    const auto r = RunStrata(Train(dir.path(), "", c.layout, 1, ""));
    EXPECT_EQ(r.exit_code, 1) << c.layout << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.layout << "\n" << r.out;
  }
}

}  // namespace
}  // namespace strata
