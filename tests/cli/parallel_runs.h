// What the model-parallel runs' tests share (sequence_parallel_test.cc,
// tensor_parallel_test.cc): a small model trained by `train --nproc 2` on NVMe, its losses read
// back from --metrics, compared within 1e-6 relative, and a token file with a loss mask and
// packed examples.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_run.h"

namespace strata::testing {

// The per-step training losses (or the evaluation losses) a run's --metrics file holds.
inline std::vector<double> Losses(const std::string& metrics, const char* key = "loss") {
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key)) losses.push_back(j[key].get<double>());
  }
  return losses;
}

inline std::string Train(const std::string& dir, const std::string& model, const std::string& layout, int steps,
                         const std::string& extra) {
  return "train --nproc 2 --steps " + std::to_string(steps) +
         " --set strata.model.n_layer=2 --set strata.model.d_model=64 --set strata.model.n_head=4 "
         "--set strata.model.seq_len=32 --set bf16.enabled=false --set strata.eval_interval=0 "
         "--set gradient_accumulation_steps=2 "
         "--set zero_optimization.offload_param.device=nvme --set zero_optimization.offload_optimizer.device=nvme "
         "--set zero_optimization.offload_param.nvme_path=" + dir +
         " --set zero_optimization.offload_optimizer.nvme_path=" + dir + " " + model + " " + layout + " " + extra;
}

inline void ExpectSameLosses(const std::vector<double>& got, const std::vector<double>& want, size_t from = 0) {
  ASSERT_EQ(got.size() + from, want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got[i] - want[i + from]), 1e-6 * std::abs(want[i + from])) << "step " << i + from;
}

// 40 000 uint16 tokens below 256 and their mask: stretches of prompt (0) and answer (1) of
// uneven lengths, so the two halves of a row train different numbers of targets; and, for
// packing, examples of 6 to 45 tokens (PATH.examples: each example's first token).
inline std::string MaskedTokens(const std::string& dir) {
  const std::string path = dir + "/tokens.u16";
  std::ofstream tokens(path, std::ios::binary), mask(path + ".mask", std::ios::binary);
  std::ofstream examples(path + ".examples", std::ios::binary);
  for (uint64_t start = 0, n = 0; start + 45 < 40000; start += 6 + (n++ * 7919) % 40)
    examples.write(reinterpret_cast<const char*>(&start), 8);
  uint32_t x = 12345;
  bool answer = false;
  for (int i = 0; i < 40000; ++i) {
    x = x * 1664525u + 1013904223u;
    const uint16_t t = static_cast<uint16_t>((x >> 16) % 256);
    tokens.write(reinterpret_cast<const char*>(&t), 2);
    if ((x >> 8) % 23 == 0) answer = !answer;
    const char m = answer ? 1 : 0;
    mask.write(&m, 1);
  }
  return path;
}

// `model` trained 20 steps split (`split`: the layout's keys, one data rank of micro-batch 4)
// and as two data ranks (`data`, micro-batch 2), the same global batch: the start-up line says
// `says`, every step's loss and gradient norm (the gradients themselves, not only what Adam's
// scale invariance makes of them) within 1e-6; and a checkpoint written split at step 10
// resumes as data parallel with the uninterrupted run's losses.
inline void ExpectSplitTrainsAsDataParallelAndResumesAsIt(const std::string& dir, const std::string& model,
                                                          const std::string& split, const std::string& data,
                                                          const std::string& says) {
  const std::string split_metrics = dir + "/split.jsonl", data_metrics = dir + "/data.jsonl";
  auto r = RunStrata(Train(dir, model, split, 20, "--metrics " + split_metrics));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
  r = RunStrata(Train(dir, model, data, 20, "--metrics " + data_metrics));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<double> whole = Losses(data_metrics);
  ASSERT_EQ(whole.size(), 20u);
  ExpectSameLosses(Losses(split_metrics), whole);
  ExpectSameLosses(Losses(split_metrics, "grad_norm"), Losses(data_metrics, "grad_norm"));
  const std::string ck = dir + "/ck", resumed = dir + "/resumed.jsonl";
  r = RunStrata(Train(dir, model, split, 10, "--save " + ck));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunStrata(Train(dir, model, data, 20, "--resume " + ck + " --metrics " + resumed));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ExpectSameLosses(Losses(resumed), whole, 10);
}

// The model families a split must train as data parallelism does: GPT-2, LLaMA with
// grouped-query heads, Qwen2 (q, k, v biases).
struct Family {
  const char* name;
  const char* model;
};
inline auto ParallelFamilies() {
  return ::testing::Values(Family{"gpt2", "--set strata.model.arch=gpt2"},
                           Family{"llama", "--set strata.model.arch=llama --set strata.model.n_kv_head=2"},
                           Family{"qwen2", "--set strata.model.arch=llama --set strata.model.n_kv_head=2 "
                                           "--set strata.model.hf_model_type=qwen2 --set strata.model.qkv_bias=true"});
}

}  // namespace strata::testing
