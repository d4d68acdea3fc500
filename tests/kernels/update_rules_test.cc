// Lion and Adagrad (Note [Update rules] in strata/cpu_adam.h), every ISA path forced in turn,
// bit for bit against the operations DeepSpeed's CPU kernels run, written out element by
// element in float: fused multiply-adds where the SIMD paths fuse, two roundings on the
// scalar path (compiled without FMA, as a plain x86-64 CPU runs it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/forced_isa_test.h"
#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "strata/isa.h"

namespace strata {
namespace {

float FusedOrNot(bool fused, float a, float b, float c) { return fused ? std::fma(a, b, c) : a * b + c; }

float XorSignBit(float x, uint32_t sign) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u ^= sign;
  std::memcpy(&x, &u, 4);
  return x;
}

// One element as DeepSpeed's cpu_lion.h computes it.
void LionReference(bool fused, const AdamHyperParams& hp, float g, float& p, float& m) {
  const float gs = g * static_cast<float>(hp.grad_unscale * hp.clip_coef);
  const float b1 = static_cast<float>(hp.beta1), b2 = static_cast<float>(hp.beta2);
  const float c = FusedOrNot(fused, gs, static_cast<float>(1.0 - hp.beta1), m * b1);
  uint32_t sign;
  std::memcpy(&sign, &c, 4);
  const float step = XorSignBit(static_cast<float>(-hp.lr), sign & 0x80000000u);  // -lr * sign(c)
  p = FusedOrNot(fused, p, static_cast<float>(1.0 - hp.lr * hp.weight_decay), step);
  m = FusedOrNot(fused, gs, static_cast<float>(1.0 - hp.beta2), m * b2);
}

// One element as DeepSpeed's cpu_adagrad.h computes it.
void AdagradReference(bool fused, const AdamHyperParams& hp, float g, float& p, float& v) {
  const float gd = FusedOrNot(fused, p, static_cast<float>(hp.weight_decay), g * static_cast<float>(hp.grad_unscale * hp.clip_coef));
  v = FusedOrNot(fused, gd, gd, v);
  const float denom = FusedOrNot(fused, std::sqrt(v), 1.0f, static_cast<float>(hp.eps));
  p = FusedOrNot(fused, gd / denom, static_cast<float>(-hp.lr), p);
}

struct RuleCase {
  UpdateRule rule;
  size_t n;
  bool decay, bf16_grad, split_master;
  HalfFormat half;
  bool with_half;
  int threads;
};

class UpdateRuleIsaTest : public ForcedIsaTest {
 protected:
  void RunCase(const RuleCase& c) {
    SCOPED_TRACE(testing::Message() << UpdateRuleName(c.rule) << " n=" << c.n << " decay=" << c.decay << " bf16_grad="
                                    << c.bf16_grad << " split=" << c.split_master << " half=" << c.with_half
                                    << " threads=" << c.threads << " isa=" << AdamIsaDescription());
    const bool fused = GetParam() != IsaLevel::kScalar;
    std::mt19937 rng(static_cast<uint32_t>(c.n * 3 + c.decay + 2 * c.bf16_grad));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    // Offsets off 64-byte alignment, a different one per array.
    std::vector<float> p(c.n + 3), state(c.n + 5), g(c.n + 2);
    std::vector<uint16_t> g16(c.n + 7), half(c.n + 1);
    std::vector<int16_t> low(c.n + 9);
    AdamHyperParams hp;
    hp.rule = c.rule;
    hp.lr = 3e-3;
    hp.beta1 = 0.9;
    hp.beta2 = 0.99;
    hp.eps = 1e-10;
    hp.weight_decay = c.decay ? 0.1 : 0.0;
    hp.grad_unscale = 1.0 / 512;
    hp.clip_coef = 0.5;
    std::vector<float> want_p(c.n), want_state(c.n);
    for (size_t i = 0; i < c.n; ++i) {
      float w = uni(rng);
      if (c.split_master) {  // a master the split format holds exactly
        SplitMasterWeights({&w, 1}, {&half[1 + i], 1}, {&low[9 + i], 1});
        JoinMasterWeights({&half[1 + i], 1}, {&low[9 + i], 1}, {&w, 1});
      }
      p[3 + i] = w;
      // Some zero gradients and states: Lion moves such an element by lr (sign(+0) = +1).
      state[5 + i] = i % 11 == 0 ? 0.0f : (c.rule == UpdateRule::kLion ? 0.01f * uni(rng) : 1e-3f * std::abs(uni(rng)));
      float gi = i % 13 == 0 ? 0.0f : 512.0f * 0.05f * uni(rng);
      if (c.bf16_grad) {
        g16[7 + i] = Fp32ToBf16(gi);
        gi = Bf16ToFp32(g16[7 + i]);
      } else {
        g[2 + i] = gi;
      }
      want_p[i] = p[3 + i];
      want_state[i] = state[5 + i];
      if (c.rule == UpdateRule::kLion) LionReference(fused, hp, gi, want_p[i], want_state[i]);
      else AdagradReference(fused, hp, gi, want_p[i], want_state[i]);
    }
    AdamSpans s;
    if (c.split_master) {
      s.master_low = {&low[9], c.n};
      s.half_out = {&half[1], c.n};
    } else {
      s.params = {&p[3], c.n};
      if (c.with_half) s.half_out = {&half[1], c.n};
      s.half_format = c.half;
    }
    (c.rule == UpdateRule::kLion ? s.exp_avg : s.exp_avg_sq) = {&state[5], c.n};
    if (c.bf16_grad) s.grad_bf16 = {&g16[7], c.n};
    else s.grad = {&g[2], c.n};
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = c.threads}).ok());
    std::vector<float> got_p(c.n);
    if (c.split_master) JoinMasterWeights({&half[1], c.n}, {&low[9], c.n}, got_p);
    else std::memcpy(got_p.data(), &p[3], c.n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < c.n && bad < 5; ++i) {
      // A split master rounds its even ties one ulp toward zero (Note [Split master]).
      const bool ok_p = c.split_master ? std::abs(got_p[i] - want_p[i]) <= std::abs(want_p[i]) * 0x1p-23f
                                       : std::memcmp(&got_p[i], &want_p[i], 4) == 0;
      const bool ok_state = std::memcmp(&state[5 + i], &want_state[i], 4) == 0;
      bool ok_half = true;
      if (c.with_half && !c.split_master)
        ok_half = half[1 + i] == (c.half == HalfFormat::kBf16 ? Fp32ToBf16(got_p[i]) : Fp32ToFp16(got_p[i]));
      if (!(ok_p && ok_state && ok_half)) {
        ++bad;
        ADD_FAILURE() << "i=" << i << " p " << got_p[i] << " vs " << want_p[i] << ", state " << state[5 + i] << " vs "
                      << want_state[i] << ", half " << half[1 + i];
      }
    }
  }
};

TEST_P(UpdateRuleIsaTest, LionAndAdagradAreDeepSpeedsCpuKernelsBitForBit) {
  for (UpdateRule rule : {UpdateRule::kLion, UpdateRule::kAdagrad})
    for (size_t n : {size_t{1}, size_t{7}, size_t{17}, size_t{100003}})
      for (bool decay : {false, true})
        for (bool bf16_grad : {false, true}) {
          const int threads = n > 1000 ? 3 : 1;
          RunCase({rule, n, decay, bf16_grad, false, HalfFormat::kBf16, false, threads});
          RunCase({rule, n, decay, bf16_grad, false, HalfFormat::kBf16, true, threads});
          RunCase({rule, n, decay, bf16_grad, false, HalfFormat::kFp16, true, threads});
          RunCase({rule, n, decay, bf16_grad, true, HalfFormat::kBf16, true, threads});
        }
}

// Trainer's groups: a no-decay range is the same elements stepped without decay, bit for bit.
TEST_P(UpdateRuleIsaTest, NoDecayRangesAreCallsWithoutDecay) {
  for (UpdateRule rule : {UpdateRule::kLion, UpdateRule::kAdagrad}) {
    const size_t n = 70001;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> p(n), st(n), g(n);
    for (size_t i = 0; i < n; ++i) p[i] = uni(rng), st[i] = 0.01f * std::abs(uni(rng)), g[i] = uni(rng);
    std::vector<float> p2 = p, st2 = st;
    AdamHyperParams hp;
    hp.rule = rule;
    hp.lr = 1e-2;
    hp.weight_decay = 0.3;
    const std::vector<std::pair<size_t, size_t>> ranges = {{100, 5000}, {40000, 40001}};
    AdamSpans s;
    s.params = p;
    (rule == UpdateRule::kLion ? s.exp_avg : s.exp_avg_sq) = st;
    s.grad = g;
    s.no_decay = ranges;
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = 2}).ok());
    size_t at = 0;
    for (auto [lo, hi] : std::vector<std::pair<size_t, size_t>>{{0, 100}, {100, 5000}, {5000, 40000}, {40000, 40001}, {40001, n}}) {
      AdamHyperParams piece = hp;
      if (lo == ranges[0].first || lo == ranges[1].first) piece.weight_decay = 0;
      AdamSpans t;
      t.params = {p2.data() + lo, hi - lo};
      (rule == UpdateRule::kLion ? t.exp_avg : t.exp_avg_sq) = {st2.data() + lo, hi - lo};
      t.grad = {g.data() + lo, hi - lo};
      ASSERT_TRUE(AdamStep(piece, t).ok());
      at = hi;
    }
    EXPECT_EQ(at, n);
    EXPECT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0) << UpdateRuleName(rule);
    EXPECT_EQ(std::memcmp(st.data(), st2.data(), n * 4), 0) << UpdateRuleName(rule);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, UpdateRuleIsaTest,
                         testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512));

TEST(UpdateRules, KeepOneFp32StateAndSayWhichWhenGivenAnother) {
  std::vector<float> p(8), m(8), v(8), g(8, 1.0f);
  std::vector<uint16_t> m16(8), v16(8);
  for (UpdateRule rule : {UpdateRule::kLion, UpdateRule::kAdagrad}) {
    AdamHyperParams hp;
    hp.rule = rule;
    AdamSpans both;
    both.params = p, both.grad = g, both.exp_avg = m, both.exp_avg_sq = v;
    const Status s = AdamStep(hp, both);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find(rule == UpdateRule::kLion ? "keeps exp_avg only" : "keeps exp_avg_sq only"),
              std::string::npos) << s.ToString();
    AdamSpans bf16;
    bf16.params = p, bf16.grad = g, bf16.exp_avg_bf16 = m16, bf16.exp_avg_sq_bf16 = v16;
    EXPECT_FALSE(AdamStep(hp, bf16).ok());
  }
  AdamHyperParams lion;
  lion.rule = UpdateRule::kLion;
  lion.eps = 0;  // unused by Lion
  AdamSpans s;
  s.params = p, s.grad = g, s.exp_avg = m;
  EXPECT_TRUE(AdamStep(lion, s).ok());
  AdamHyperParams adagrad;
  adagrad.rule = UpdateRule::kAdagrad;
  adagrad.beta1 = 1.5;  // unused by Adagrad
  AdamSpans t;
  t.params = p, t.grad = g, t.exp_avg_sq = v;
  EXPECT_TRUE(AdamStep(adagrad, t).ok());
}

}  // namespace
}  // namespace strata
