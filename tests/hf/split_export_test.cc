// The Hugging Face folder a split run exports (Note [Tensor parallel]): a GPT-2, LLaMA (grouped-query
// heads) or Qwen2-shaped model written by transformers, trained from that folder by `train --nproc 2`
// with each layer's heads and MLP width split over both ranks (tensor_parallel.autotp_size 2),
// parameters and optimizer states on NVMe, then `export`:
//   1. with a learning rate of 0 the export is the folder it started from: transformers' logits on
//      it are the folder's own (hf_models.py logits), so every slice went back to its place;
//   2. trained for 5 steps, its tensors are those the data-parallel run of the same global batch
//      exports, within the rounding the split sums leave. Adam's epsilon is 1 there: Adam divides
//      each gradient by its own running size, so a gradient that is fp32 rounding noise (a sum
//      taken in another order) moves its weight by a whole step, and two data-parallel layouts
//      (1 rank and 2) already differ by 2e-3 after 5 steps; with epsilon 1 an update is in
//      proportion to its gradient, and the two layouts differ by 2e-5 while the weights move by
//      about 1e-2.
// Needs the Python peers, as hf_test.cc (skipped with the reason, or failed where required).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hf/folder_tensors.h"
#include "hf/hf_peers.h"
#include "src/checkpoint/safetensors.h"
#include "support/cli_run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Largest |a - b| over two exported fp32 folders, tensor by tensor; fails on a tensor missing
// from either or shaped differently.
double LargestExportDifference(const std::string& a_folder, const std::string& b_folder) {
  std::vector<ckpt::SafetensorsFile> a_files, b_files;
  const auto a_tensors = testing::FolderTensors(a_folder, &a_files), b_tensors = testing::FolderTensors(b_folder, &b_files);
  EXPECT_EQ(a_tensors.size(), b_tensors.size()) << a_folder << " and " << b_folder << " hold different tensors";
  double worst = 0;
  for (const auto& [name, a] : a_tensors) {
    auto it = b_tensors.find(name);
    if (it == b_tensors.end()) {
      ADD_FAILURE() << name << " is in " << a_folder << " but not in " << b_folder;
      continue;
    }
    const ckpt::TensorView& b = *it->second;
    if (a->shape != b.shape || a->bytes.size() != b.bytes.size() || a->bytes.size() % sizeof(float) != 0) {
      ADD_FAILURE() << name << ": shapes or sizes differ";
      continue;
    }
    std::vector<float> x(a->bytes.size() / sizeof(float)), y(x.size());
    std::memcpy(x.data(), a->bytes.data(), a->bytes.size());
    std::memcpy(y.data(), b.bytes.data(), b.bytes.size());
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(x[i] - y[i])));
  }
  return worst;
}

class SplitRunExport : public testing::HfPeersTest {};

TEST_P(SplitRunExport, IsTheFolderItStartedFromAndTheDataParallelRunsExport) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/hf", swap = dir.path() + "/swap";
  fs::create_directory(swap);
  std::string out;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf, &out), 0) << out;
  const std::string common = "train --nproc 2 --init-from " + hf +
                             " --set strata.model.seq_len=32 --set strata.eval_interval=0"
                             " --set zero_optimization.offload_param.nvme_path=" + swap +
                             " --set zero_optimization.offload_optimizer.nvme_path=" + swap;
  const std::string tensor = " --set tensor_parallel.autotp_size=2 --set train_micro_batch_size_per_gpu=4";
  const std::string data = " --set train_micro_batch_size_per_gpu=2";
  auto train_and_export = [&](const std::string& name, const std::string& args) {
    const std::string ck = dir.path() + "/ck_" + name, folder = dir.path() + "/" + name;
    testing::CliRun r = testing::RunStrata(common + args + " --save " + ck);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    r = testing::RunStrata("export " + ck + " --out " + folder);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return folder;
  };

  // 1. Nothing learnt: the export gives transformers the folder's own logits.
  const std::string unmoved = train_and_export("unmoved", tensor + " --steps 2 --set optimizer.params.lr=0");
  ASSERT_EQ(testing::RunHfModels("logits " + hf + " " + unmoved, &out), 0) << out;
  std::printf("[ %s ] split run, learning rate 0, exported: %s", GetParam().c_str(), out.c_str());

  // 2. Trained split and trained as data parallel: the same tensors.
  const std::string trained = " --steps 5 --set optimizer.params.lr=0.1 --set optimizer.params.eps=1";
  const std::string split = train_and_export("split", tensor + trained);
  const std::string whole = train_and_export("whole", data + trained);
  const double worst = LargestExportDifference(split, whole), moved = LargestExportDifference(whole, unmoved);
  std::printf("[ %s ] 5 steps: max |split export - data-parallel export| = %.3g; the weights moved by up to %.3g\n",
              GetParam().c_str(), worst, moved);
  EXPECT_LE(worst, 1e-4);
  EXPECT_GE(moved, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, SplitRunExport, ::testing::Values("gpt2", "llama", "qwen2"));

}  // namespace
}  // namespace strata
