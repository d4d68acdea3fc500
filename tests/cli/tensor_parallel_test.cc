// Tensor parallelism end to end (Note [Tensor parallel]): `train --nproc 2` with DeepSpeed's
// tensor_parallel.autotp_size 2 (one data rank, each layer's heads and MLP width split over
// both ranks) against the data-parallel run of the same global batch (2 data ranks of half the
// micro-batch): GPT-2, LLaMA (grouped-query heads) and Qwen2-shaped models, fp32, parameters
// and optimizer states on NVMe, 20 steps, every step's loss within 1e-6 relative; a checkpoint
// written split resumes as data parallel with the uninterrupted run's losses; data 2 x tensor 2
// on four ranks trains as four data ranks and resumes as them; a loss mask, packed examples,
// a tiled MLP and a tiled loss split over the vocabulary keep their meaning; and what is not
// split yet is refused at start-up by name. LoRA adapters (with dropout, on an NF4 base) split
// with their projections; Gemma 2 splits too.
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

constexpr const char* kTensor = "--set tensor_parallel.autotp_size=2 --set train_micro_batch_size_per_gpu=4";
constexpr const char* kDataRanks = "--set train_micro_batch_size_per_gpu=2";

std::string OnRanks(std::string run, int ranks) {
  run.replace(run.find("--nproc 2"), 9, "--nproc " + std::to_string(ranks));
  return run;
}

class TensorParallel : public ::testing::TestWithParam<Family> {};

TEST_P(TensorParallel, LossesAreTheDataParallelRunsAndACheckpointResumesAsDataParallel) {
  testing::TempDir dir;
  testing::ExpectSplitTrainsAsDataParallelAndResumesAsIt(
      dir.path(), GetParam().model, kTensor, kDataRanks,
      "1 data rank(s), each layer's heads and MLP width split over 2 ranks (tensor parallel)");
}

INSTANTIATE_TEST_SUITE_P(
    Cli, TensorParallel,
    testing::ParallelFamilies(),
    [](const auto& info) { return std::string(info.param.name); });

// Four ranks as data 2 x tensor 2 (each pair of neighbours one tensor group, reading its own
// micro-batches) train as four data ranks with the same global batch, and a checkpoint they
// write resumes as four data ranks.
TEST(TensorParallelMesh, DataTwoByTensorTwoIsDataFourAndResumesAsIt) {
  testing::TempDir dir;
  const std::string model = "--set strata.model.arch=llama --set strata.model.n_kv_head=2";
  const std::string mesh = dir.path() + "/mesh.jsonl", data = dir.path() + "/data.jsonl";
  const std::string tensor = "--set tensor_parallel.autotp_size=2 --set train_micro_batch_size_per_gpu=2";
  const std::string data4 = "--set train_micro_batch_size_per_gpu=1";
  auto r = RunStrata(OnRanks(Train(dir.path(), model, tensor, 8, "--metrics " + mesh), 4));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("2 data rank(s), each layer's heads and MLP width split over 2 ranks"), std::string::npos) << r.out;
  r = RunStrata(OnRanks(Train(dir.path(), model, data4, 8, "--metrics " + data), 4));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(data).size(), 8u);
  ExpectSameLosses(Losses(mesh), Losses(data));
  ExpectSameLosses(Losses(mesh, "grad_norm"), Losses(data, "grad_norm"));
  const std::string ck = dir.path() + "/ck", resumed = dir.path() + "/resumed.jsonl";
  r = RunStrata(OnRanks(Train(dir.path(), model, tensor, 4, "--save " + ck), 4));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunStrata(OnRanks(Train(dir.path(), model, data4, 8, "--resume " + ck + " --metrics " + resumed), 4));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ExpectSameLosses(Losses(resumed), Losses(data), 4);
}

// `model` with tensor 2 (one data rank of micro-batch 4) trains as one rank with the same 4
// rows: 10 steps' losses and gradient norms within 1e-6 (and the evaluation losses, where
// `evals` says how many). `tag` names the runs' metrics files in `dir`.
void ExpectTensorTwoTrainsAsOneRank(const std::string& dir, const std::string& model, const std::string& tag,
                                    size_t evals = 0) {
  const std::string split = dir + "/split" + tag + ".jsonl", one = dir + "/one" + tag + ".jsonl";
  auto r = RunStrata(Train(dir, model, kTensor, 10, "--metrics " + split));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunStrata(OnRanks(Train(dir, model, "--set train_micro_batch_size_per_gpu=4", 10, "--metrics " + one), 1));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(Losses(one).size(), 10u);
  ExpectSameLosses(Losses(split), Losses(one));
  ExpectSameLosses(Losses(split, "grad_norm"), Losses(one, "grad_norm"));
  ASSERT_EQ(Losses(one, "eval_loss").size(), evals);
  ExpectSameLosses(Losses(split, "eval_loss"), Losses(one, "eval_loss"));
}

// A loss mask (each rank of a tensor group weighs the whole batch's targets once, Note [Loss
// mask]), its evaluation losses, packed examples, a tiled MLP (each tile's all-reduce run again
// in the backward) and a tiled loss (the head split over the vocabulary).
TEST(TensorParallelData, ALossMaskPackedExamplesAndTilesTrainAsOneRank) {
  testing::TempDir dir;
  const std::string data_file = MaskedTokens(dir.path());
  const std::string model = "--set strata.model.arch=llama --set strata.model.n_kv_head=2 "
                            "--set strata.model.vocab_size=256 --set strata.data.path=" + data_file +
                            " --set strata.eval_interval=5 --set strata.eval_batches=2";
  for (const std::string extra :
       {"", " --set strata.data.packing=packed", " --set strata.mlp_chunk=16", " --set strata.loss_chunk=24"}) {
    SCOPED_TRACE(extra);
    ExpectTensorTwoTrainsAsOneRank(dir.path(), model + extra, extra.substr(extra.rfind('.') + 1), 3);
  }
}

// LoRA on every projection, with dropout (each rank draws the whole width's masks in the
// unsplit run's order and applies its share's part, Note [LoRA dropout]) and on an NF4 base
// (QLoRA).
TEST(TensorParallelLora, AdaptersWithDropoutAndOnAnNf4BaseTrainAsOneRank) {
  testing::TempDir dir;
  const std::string lora = "--set strata.model.arch=llama --set strata.model.n_kv_head=2 --set strata.lora.r=4 "
                           "--set strata.lora.alpha=8 --set 'strata.lora.target_modules="
                           "[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\",\"gate_proj\",\"up_proj\",\"down_proj\"]' ";
  for (const std::string extra : {"--set strata.lora.dropout=0.2", "--set strata.lora.base_dtype=nf4"}) {
    SCOPED_TRACE(extra);
    ExpectTensorTwoTrainsAsOneRank(dir.path(), lora + extra, extra.substr(extra.rfind('=') + 1));
  }
}

// Gemma 2: soft-capped attention on a share of the heads, GeGLU on a share of the width, the
// tied head's final soft-cap.
TEST(TensorParallelGemma, Gemma2TrainsAsOneRank) {
  testing::TempDir dir;
  ExpectTensorTwoTrainsAsOneRank(
      dir.path(),
      "--set strata.model.arch=llama --set strata.model.n_kv_head=2 --set strata.model.hf_model_type=gemma2 "
      "--set strata.model.sliding_window=32 --set strata.model.tie_embeddings=true --set 'strata.model.gemma="
      "{\"query_pre_attn_scalar\":16,\"attn_softcap\":50,\"final_softcap\":30,\"sliding_layers\":[true,false]}'",
      "gemma2");
}

TEST(TensorParallelRefusals, WhatIsNotSplitYetIsRefusedAtStartUpNamingIt) {
  testing::TempDir dir;
  const struct {
    const char* layout;
    const char* says;
  } cases[] = {
      {"--set tensor_parallel.autotp_size=3", "tensor_parallel.autotp_size 3: the world of 2 rank(s) does not split"},
      {"--set tensor_parallel.autotp_size=2 --set strata.model.arch=llama --set strata.model.n_kv_head=1",
       "do not split over 2 ranks"},
      {"--set tensor_parallel.autotp_size=2 --set strata.model.arch=llama --set strata.model.n_kv_head=2 "
       "--set strata.model.hf_model_type=phi3 --set strata.lora.r=4 --set 'strata.lora.target_modules=[\"qkv_proj\"]'",
       "adapters on Phi-3's fused qkv_proj and gate_up_proj are not split yet"},
      {"--set tensor_parallel.autotp_size=2 --set strata.model.arch=llama --set strata.model.n_kv_head=2 "
       "--set strata.model.hf_model_type=qwen3_moe --set strata.model.qk_norm=true "
       "--set 'strata.model.moe={\"num_experts\":4,\"top_k\":2,\"expert_ffn\":32}'",
       "model_type \"qwen3_moe\" is not split yet"},
      {"--set tensor_parallel.autotp_size=2 --set 'tensor_parallel.tp={\"tp_size\":4}'",
       "tensor_parallel.tp.tp_size (4) does not match tensor_parallel.autotp_size (2)"},
  };
  for (const auto& c : cases) {
    const auto r = RunStrata(Train(dir.path(), "", c.layout, 1, ""));
    EXPECT_EQ(r.exit_code, 1) << c.layout << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.layout << "\n" << r.out;
  }
}

}  // namespace
}  // namespace strata
