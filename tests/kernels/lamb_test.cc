// LAMB (Note [Update rules], Note [LAMB trust ratio] in strata/cpu_adam.h), every ISA path
// forced in turn: the norm pass and the update against FusedLamb's operations written out
// element by element in float (fused multiply-adds where the SIMD paths fuse, two roundings
// on the scalar path), the update bit for bit; a tensor cut into slices is the tensor.
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

float LambFma(bool fused, float a, float b, float c) { return fused ? std::fma(a, b, c) : a * b + c; }

// One element of FusedLamb's part 1 (m, v and u) in the kernel's operation order.
float LambDirectionReference(bool fused, const AdamHyperParams& hp, float wd, float g, float p, float& m, float& v) {
  const float gs = g * static_cast<float>(hp.grad_unscale * hp.clip_coef);
  m = LambFma(fused, static_cast<float>(hp.beta1), m, static_cast<float>(1.0 - hp.beta1) * gs);
  v = LambFma(fused, static_cast<float>(hp.beta2), v, static_cast<float>(1.0 - hp.beta2) * (gs * gs));
  const float eps = static_cast<float>(hp.eps);
  const float denom = hp.eps_inside_sqrt ? std::sqrt(LambFma(fused, v, 1.0f, eps)) : LambFma(fused, std::sqrt(v), 1.0f, eps);
  return LambFma(fused, p, wd, m / denom);
}

struct LambCase {
  size_t n;
  bool decay, bf16_grad, split_master, eps_inside, bias_correction;
  int threads;
};

class LambIsaTest : public ForcedIsaTest {
 protected:
  void RunCase(const LambCase& c) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " decay=" << c.decay << " bf16_grad=" << c.bf16_grad
                                    << " split=" << c.split_master << " eps_inside=" << c.eps_inside
                                    << " threads=" << c.threads << " isa=" << AdamIsaDescription());
    const bool fused = GetParam() != IsaLevel::kScalar;
    std::mt19937 rng(static_cast<uint32_t>(c.n * 7 + c.decay + 2 * c.bf16_grad + 4 * c.split_master));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> p(c.n + 3), m(c.n + 5), v(c.n + 1), g(c.n + 2);
    std::vector<uint16_t> g16(c.n + 7), half(c.n + 1);
    std::vector<int16_t> low(c.n + 9);
    AdamHyperParams hp;
    hp.rule = UpdateRule::kLamb;
    hp.lr = 2e-3;
    hp.beta1 = 0.9;
    hp.beta2 = 0.99;
    hp.eps = 1e-6;
    hp.step = 3;
    hp.bias_correction = c.bias_correction;
    hp.eps_inside_sqrt = c.eps_inside;
    hp.weight_decay = c.decay ? 0.1 : 0.0;
    hp.grad_unscale = 1.0 / 256;
    hp.clip_coef = 0.5;
    // Trainer's groups: a range without decay, cut through by the thread ranges.
    const std::vector<std::pair<size_t, size_t>> no_decay = {{c.n / 3, c.n / 3 + c.n / 5 + 1}};
    auto wd_of = [&](size_t i) {
      return i >= no_decay[0].first && i < no_decay[0].second ? 0.0f : static_cast<float>(hp.weight_decay);
    };
    std::vector<float> want_p(c.n), want_m(c.n), want_v(c.n), u(c.n);
    double want_w = 0, want_u = 0;
    for (size_t i = 0; i < c.n; ++i) {
      float w = uni(rng);
      if (c.split_master) {  // a master the split format holds exactly
        SplitMasterWeights({&w, 1}, {&half[1 + i], 1}, {&low[9 + i], 1});
        JoinMasterWeights({&half[1 + i], 1}, {&low[9 + i], 1}, {&w, 1});
      }
      p[3 + i] = w;
      m[5 + i] = i % 11 == 0 ? 0.0f : 0.01f * uni(rng);
      v[1 + i] = i % 11 == 0 ? 0.0f : 1e-4f * std::abs(uni(rng));
      float gi = i % 13 == 0 ? 0.0f : 256.0f * 0.05f * uni(rng);
      if (c.bf16_grad) {
        g16[7 + i] = Fp32ToBf16(gi);
        gi = Bf16ToFp32(g16[7 + i]);
      } else {
        g[2 + i] = gi;
      }
      want_m[i] = m[5 + i];
      want_v[i] = v[1 + i];
      u[i] = LambDirectionReference(fused, hp, wd_of(i), gi, w, want_m[i], want_v[i]);
      want_w += static_cast<double>(w) * w;
      want_u += static_cast<double>(u[i]) * u[i];
    }
    AdamSpans s;
    if (c.split_master) {
      s.master_low = {&low[9], c.n};
      s.half_out = {&half[1], c.n};
    } else {
      s.params = {&p[3], c.n};
    }
    s.exp_avg = {&m[5], c.n};
    s.exp_avg_sq = {&v[1], c.n};
    if (c.bf16_grad) s.grad_bf16 = {&g16[7], c.n};
    else s.grad = {&g[2], c.n};
    s.no_decay = no_decay;

    // The norm pass writes nothing and sums what the reference sums (in another order).
    const std::vector<float> m_before = m, v_before = v, p_before = p;
    LambSums sums;
    ASSERT_TRUE(LambNormSums(hp, s, &sums, {.num_threads = c.threads}).ok());
    EXPECT_EQ(m, m_before);
    EXPECT_EQ(v, v_before);
    EXPECT_EQ(p, p_before);
    EXPECT_NEAR(sums.weight_sq, want_w, 1e-12 * want_w);
    EXPECT_NEAR(sums.update_sq, want_u, 1e-12 * want_u);

    hp.trust_ratio = LambTrustRatio(sums.weight_sq, sums.update_sq, 0.01, 10.0);
    const double bc1 = 1 - std::pow(hp.beta1, 3.0), bc2 = 1 - std::pow(hp.beta2, 3.0);
    const float step_size = static_cast<float>(c.bias_correction ? hp.lr * std::sqrt(bc2) / bc1 : hp.lr);
    const float neg = -(step_size * static_cast<float>(hp.trust_ratio));
    for (size_t i = 0; i < c.n; ++i) want_p[i] = LambFma(fused, neg, u[i], p[3 + i]);
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = c.threads}).ok());
    std::vector<float> got_p(c.n);
    if (c.split_master) JoinMasterWeights({&half[1], c.n}, {&low[9], c.n}, got_p);
    else std::memcpy(got_p.data(), &p[3], c.n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < c.n && bad < 5; ++i) {
      // A split master rounds its even ties one ulp toward zero (Note [Split master]).
      const bool ok_p = c.split_master ? std::abs(got_p[i] - want_p[i]) <= std::abs(want_p[i]) * 0x1p-23f
                                       : std::memcmp(&got_p[i], &want_p[i], 4) == 0;
      const bool ok_m = std::memcmp(&m[5 + i], &want_m[i], 4) == 0, ok_v = std::memcmp(&v[1 + i], &want_v[i], 4) == 0;
      if (!(ok_p && ok_m && ok_v)) {
        ++bad;
        ADD_FAILURE() << "i=" << i << " p " << got_p[i] << " vs " << want_p[i] << ", m " << m[5 + i] << " vs "
                      << want_m[i] << ", v " << v[1 + i] << " vs " << want_v[i];
      }
    }
  }
};

TEST_P(LambIsaTest, NormPassAndUpdateAreFusedLambsOperations) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{33}, size_t{100003}})
    for (bool decay : {false, true})
      for (bool bf16_grad : {false, true}) {
        const int threads = n > 1000 ? 3 : 1;
        RunCase({n, decay, bf16_grad, false, false, true, threads});
        RunCase({n, decay, bf16_grad, true, false, true, threads});
        RunCase({n, decay, bf16_grad, false, true, false, threads});
      }
}

// A tensor stepped in slices (its sub-groups, its ranks' ranges) with one trust ratio is the
// tensor stepped whole, bit for bit; the slices' sums add up to the whole's.
TEST_P(LambIsaTest, SlicesAreTheWholeTensor) {
  const size_t n = 50021;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> p(n), m(n), v(n), g(n);
  for (size_t i = 0; i < n; ++i) p[i] = uni(rng), m[i] = 0.01f * uni(rng), v[i] = 1e-4f * std::abs(uni(rng)), g[i] = uni(rng);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  AdamHyperParams hp;
  hp.rule = UpdateRule::kLamb;
  hp.weight_decay = 0.05;
  hp.trust_ratio = 0.37;
  const std::vector<std::pair<size_t, size_t>> no_decay = {{1000, 9000}, {20000, 20001}, {30000, 40000}};
  auto spans = [&](std::vector<float>& pp, std::vector<float>& mm, std::vector<float>& vv) {
    AdamSpans s;
    s.params = pp, s.exp_avg = mm, s.exp_avg_sq = vv, s.grad = g, s.no_decay = no_decay;
    return s;
  };
  const AdamSpans whole = spans(p, m, v), cut = spans(p2, m2, v2);
  LambSums all;
  ASSERT_TRUE(LambNormSums(hp, whole, &all, {.num_threads = 2}).ok());
  ASSERT_TRUE(AdamStep(hp, whole, {.num_threads = 2}).ok());
  LambSums added;
  std::vector<std::pair<size_t, size_t>> storage;
  for (auto [lo, hi] : std::vector<std::pair<size_t, size_t>>{{0, 5000}, {5000, 20000}, {20000, 35000}, {35000, n}}) {
    const AdamSpans slice = SliceSpans(cut, lo, hi, &storage);
    LambSums part;
    ASSERT_TRUE(LambNormSums(hp, slice, &part).ok());
    added.weight_sq += part.weight_sq;
    added.update_sq += part.update_sq;
    ASSERT_TRUE(AdamStep(hp, slice).ok());
  }
  EXPECT_NEAR(added.weight_sq, all.weight_sq, 1e-12 * all.weight_sq);
  EXPECT_NEAR(added.update_sq, all.update_sq, 1e-12 * all.update_sq);
  EXPECT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(m.data(), m2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(v.data(), v2.data(), n * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Isa, LambIsaTest, testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512));

TEST(LambTrustRatio, IsFusedLambsClampedRatioAndOneWhereANormIsZero) {
  EXPECT_EQ(LambTrustRatio(0, 4, 0.01, 10), 1.0);
  EXPECT_EQ(LambTrustRatio(4, 0, 0.01, 10), 1.0);
  EXPECT_FLOAT_EQ(LambTrustRatio(4, 1, 0.01, 10), 2.0);
  EXPECT_FLOAT_EQ(LambTrustRatio(10000, 1, 0.01, 10), 10.0);
  EXPECT_FLOAT_EQ(LambTrustRatio(1e-8, 1, 0.01, 10), 0.01);
}

TEST(LambKernel, KeepsBothMomentsInFp32AndRefusesOthers) {
  std::vector<float> p(8), m(8), v(8), g(8, 1.0f);
  std::vector<uint16_t> m16(8), v16(8);
  AdamHyperParams hp;
  hp.rule = UpdateRule::kLamb;
  AdamSpans one;
  one.params = p, one.grad = g, one.exp_avg = m;
  EXPECT_FALSE(AdamStep(hp, one).ok());
  AdamSpans bf16;
  bf16.params = p, bf16.grad = g, bf16.exp_avg_bf16 = m16, bf16.exp_avg_sq_bf16 = v16;
  const Status s = AdamStep(hp, bf16);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("LAMB keeps exp_avg and exp_avg_sq in fp32"), std::string::npos) << s.ToString();
  hp.trust_ratio = -1;
  AdamSpans ok;
  ok.params = p, ok.grad = g, ok.exp_avg = m, ok.exp_avg_sq = v;
  EXPECT_FALSE(AdamStep(hp, ok).ok());
  LambSums sums;
  hp.rule = UpdateRule::kAdam;
  hp.trust_ratio = 1;
  EXPECT_FALSE(LambNormSums(hp, ok, &sums).ok());
}

}  // namespace
}  // namespace strata
