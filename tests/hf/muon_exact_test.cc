// Muon on the same gradients as its references, bit for bit (Note [Muon]): for a tall, a wide
// and a square matrix, Strata's direction pass (MuonNesterov), its Newton-Schulz
// (OrthogonalizeMatrix, on the CPU) and its update (AdamStep, UpdateRule::kMuon) against one
// step of torch.optim.Muon ("torch") and of DeepSpeed 0.19.8's muon_update plus
// MuonWithAuxAdam's step ("gram", "standard"), run by optimizer_peers.py muon-exact on the same
// weights, momentum and gradient. The end-to-end comparison (optimizer_hf_test.cc) cannot show
// this: there the two backward passes already differ in the last bit.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/hf_peers.h"
#include "src/engine/update/newton_schulz.h"
#include "strata/cpu_adam.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

void WriteFloats(const std::string& path, const std::vector<float>& x) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

TEST(MuonExact, OneStepIsTorchsAndDeepSpeedsBitForBit) {
  testing::RequireHfPeers(" deepspeed", "torch + transformers + safetensors + deepspeed");
  testing::TempDir dir;
  nlohmann::json cases = nlohmann::json::array();
  int k = 0;
  for (const auto& [ns, name] : {std::pair{MuonNs::kTorch, "torch"}, {MuonNs::kGram, "gram"}, {MuonNs::kStandard, "standard"}}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{48, 16}, {16, 48}, {32, 32}}) {
      const size_t n = static_cast<size_t>(rows * cols);
      std::mt19937 rng(static_cast<uint32_t>(7 + k));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> p(n), m(n), g(n), u(n), o(n);
      for (size_t i = 0; i < n; ++i) p[i] = 0.02f * normal(rng), m[i] = 0.01f * normal(rng), g[i] = 0.1f * normal(rng);
      const std::string at = dir.path() + "/case" + std::to_string(k);
      WriteFloats(at + ".p", p);
      WriteFloats(at + ".m", m);
      WriteFloats(at + ".g", g);
      AdamHyperParams hp;
      hp.rule = UpdateRule::kMuon;
      hp.lr = 0.02;
      hp.beta1 = 0.95;
      hp.weight_decay = 0.1;
      hp.muon_lr_ratio = MuonLrRatio(ns, rows, cols);
      AdamSpans spans;
      spans.params = p, spans.exp_avg = m, spans.grad = g, spans.muon_update = o;
      ASSERT_TRUE(MuonNesterov(hp, spans, u).ok());
      ASSERT_TRUE(OrthogonalizeMatrix(ns, u.data(), rows, cols, c10::Device(c10::kCPU), o.data()).ok());
      ASSERT_TRUE(AdamStep(hp, spans).ok());
      WriteFloats(at + ".p_after", p);
      WriteFloats(at + ".m_after", m);
      cases.push_back({{"path", at}, {"ns_method", name}, {"rows", rows}, {"cols", cols}, {"lr", hp.lr},
                       {"momentum", hp.beta1}, {"weight_decay", hp.weight_decay}});
      ++k;
    }
  }
  const std::string list = dir.path() + "/cases.json";
  std::ofstream(list) << cases.dump();
  std::string out;
  const int rc = testing::RunHfModels("muon-exact " + list, &out);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace strata
