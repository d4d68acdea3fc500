// Adam's m and v kept in bf16 (strata.adam_states "bf16") are rounded back stochastically
// (Note [Stochastic rounding of the moments], strata/cpu_adam.h): the rule, its random bits,
// and the kernel, every ISA path forced in turn against the scalar one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "kernels/forced_isa_test.h"
#include "kernels/kernel_test_util.h"
#include "strata/isa.h"

namespace strata {
namespace {

using kernel_test::FloatFromBits;
using kernel_test::StepFive;

TEST(StochasticRounding, AddsTheRandomLowHalfAndTruncates) {
  const float quarter = FloatFromBits(0x3f804000);  // 1 + 2^-9: a quarter of a bf16 ulp above 1
  EXPECT_EQ(Fp32ToBf16Stochastic(quarter, 0), 0x3f80);
  EXPECT_EQ(Fp32ToBf16Stochastic(quarter, 0xbfff), 0x3f80);
  EXPECT_EQ(Fp32ToBf16Stochastic(quarter, 0xc000), 0x3f81);  // up for a quarter of the values
  EXPECT_EQ(Fp32ToBf16Stochastic(quarter, 0xffffc000), 0x3f81);  // only the low 16 bits count
  EXPECT_EQ(Fp32ToBf16Stochastic(-quarter, 0xc000), 0xbf81);  // away from zero, as for +x
  EXPECT_EQ(Fp32ToBf16Stochastic(FloatFromBits(0x3fffffff), 1), 0x4000);  // the carry moves to the next binade
  for (uint32_t r : {0u, 0x8000u, 0xffffu}) {
    EXPECT_EQ(Fp32ToBf16Stochastic(1.0f, r), 0x3f80);  // representable: unchanged
    EXPECT_EQ(Fp32ToBf16Stochastic(0.0f, r), 0x0000);
    EXPECT_EQ(Fp32ToBf16Stochastic(-0.0f, r), 0x8000);
    EXPECT_EQ(Fp32ToBf16Stochastic(INFINITY, r), 0x7f80);
    EXPECT_EQ(Fp32ToBf16Stochastic(-INFINITY, r), 0xff80);
    EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16Stochastic(FloatFromBits(0x7fffffff), r))));  // no carry into the sign
    EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16Stochastic(FloatFromBits(0x7f800001), r))));  // nor to Inf
  }
}

// The mean of K roundings of x, each with the m (low) or v (high) half of AdamRoundingBits
// for K indices. One rounding's error is at most one ulp with standard deviation at most
// ulp / 2, so the mean of K is within 6 ulp / (2 sqrt(K)) of x but with probability ~1e-9
// (the bits are deterministic: this is the bound they are held to).
double MeanOfRoundings(float x, uint64_t seed, bool high, int k) {
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    const uint32_t bits = AdamRoundingBits(seed, 1000 + static_cast<uint64_t>(i) * 7);
    sum += Bf16ToFp32(Fp32ToBf16Stochastic(x, high ? bits >> 16 : bits & 0xffff));
  }
  return sum / k;
}

TEST(StochasticRounding, IsUnbiasedForEitherSignAndSubnormals) {
  const int k = 1 << 16;
  std::mt19937 rng(3);
  std::vector<float> xs = {FloatFromBits(0x3f804000),  FloatFromBits(0x3f80c123), -FloatFromBits(0x3f80c123),
                           FloatFromBits(0x00012345),  -FloatFromBits(0x00012345), 1e-4f,
                           3.3e-9f};
  for (int i = 0; i < 8; ++i) xs.push_back(std::ldexp(std::uniform_real_distribution<float>(1, 2)(rng), -i * 9));
  for (float x : xs) {
    // One bf16 ulp at x: the distance between the two values it rounds to.
    const float down = Bf16ToFp32(Fp32ToBf16Stochastic(x, 0)), up = Bf16ToFp32(Fp32ToBf16Stochastic(x, 0xffff));
    const double ulp = std::abs(static_cast<double>(up) - down), tol = 6 * ulp / (2 * std::sqrt(k));
    for (bool high : {false, true}) {
      for (uint64_t seed : {uint64_t{1}, MixRoundingSeed(300, 7)}) {
        EXPECT_NEAR(MeanOfRoundings(x, seed, high, k), x, tol) << x << " high=" << high << " seed=" << seed;
      }
    }
  }
}

TEST(StochasticRounding, BitsAreAFunctionOfSeedAndIndexWithIndependentHalves) {
  EXPECT_EQ(AdamRoundingBits(5, 123), AdamRoundingBits(5, 123));
  EXPECT_NE(AdamRoundingBits(5, 123), AdamRoundingBits(6, 123));
  EXPECT_NE(AdamRoundingBits(5, 123), AdamRoundingBits(5, 124));
  EXPECT_NE(AdamRoundingBits(5, 123), AdamRoundingBits(5, 123 + (uint64_t{1} << 32)));  // the high half counts
  EXPECT_NE(MixRoundingSeed(1, 2), MixRoundingSeed(2, 1));
  // m and v of one element round up together as often as two independent coins would: for
  // a quarter-ulp value, P(both) = 1/16; over K elements within 6 standard deviations.
  const int k = 1 << 16;
  int m_up = 0, v_up = 0, both = 0;
  for (int i = 0; i < k; ++i) {
    const uint32_t bits = AdamRoundingBits(MixRoundingSeed(9, 4), static_cast<uint64_t>(i));
    const bool m = (bits & 0xffff) >= 0xc000, v = (bits >> 16) >= 0xc000;
    m_up += m, v_up += v, both += m && v;
  }
  const double sd4 = std::sqrt(k * 0.25 * 0.75), sd16 = std::sqrt(k / 16.0 * 15 / 16);
  EXPECT_NEAR(m_up, k / 4.0, 6 * sd4);
  EXPECT_NEAR(v_up, k / 4.0, 6 * sd4);
  EXPECT_NEAR(both, k / 16.0, 6 * sd16);
}

class AdamRoundingIsaTest : public ForcedIsaTest {};

// One sub-group's state with bf16 moments, offset by `shift` elements from its allocation
// (misaligned starts; no two arrays co-aligned).
struct Bf16State {
  Bf16State(size_t n, uint32_t seed, size_t shift) : n(n), p(n + 8), g(n + 8), m(n + 8), v(n + 8), half(n + 8) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (size_t i = 0; i < n + 8; ++i) {
      p[i] = uni(rng);
      g[i] = 0.05f * uni(rng);
      m[i] = Fp32ToBf16(0.01f * uni(rng));
      v[i] = Fp32ToBf16(1e-4f * std::abs(uni(rng)) + 1e-8f);
    }
    at = shift;
  }
  AdamSpans Spans(size_t begin, size_t len, uint64_t seed, uint64_t index0) {
    AdamSpans s;
    s.params = {p.data() + at + 1 + begin, len};
    s.grad = {g.data() + at + 3 + begin, len};
    s.exp_avg_bf16 = {m.data() + at + 2 + begin, len};
    s.exp_avg_sq_bf16 = {v.data() + at + 5 + begin, len};
    s.half_out = {half.data() + at + begin, len};
    s.rounding_seed = seed;
    s.rounding_index = index0 + begin;
    return s;
  }
  size_t n, at = 0;
  std::vector<float> p, g;
  std::vector<uint16_t> m, v, half;
};

// What a bf16-moment update of all of `s` must leave (the state after it, arrays as laid out
// in `s`): the fp32 update of the decoded moments by the same ISA (p and the half copy
// bitwise), m and v rounded with Fp32ToBf16Stochastic and the low / high half of
// AdamRoundingBits(seed, index0 + i). ISAs differ in their fp32 arithmetic (the scalar path
// has no FMA), never in the rounding's bits.
Bf16State ExpectedUpdate(const Bf16State& before, uint64_t seed, uint64_t index0) {
  Bf16State want = before;
  const size_t n = before.n;
  AdamSpans s16 = want.Spans(0, n, seed, index0);
  std::vector<float> m32(n), v32(n);
  for (size_t i = 0; i < n; ++i) m32[i] = Bf16ToFp32(s16.exp_avg_bf16[i]), v32[i] = Bf16ToFp32(s16.exp_avg_sq_bf16[i]);
  AdamSpans wide;
  wide.params = s16.params, wide.grad = s16.grad, wide.half_out = s16.half_out;
  wide.exp_avg = m32, wide.exp_avg_sq = v32;
  EXPECT_TRUE(AdamStep(StepFive(), wide, {.num_threads = 1}).ok());
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = AdamRoundingBits(seed, index0 + i);
    s16.exp_avg_bf16[i] = Fp32ToBf16Stochastic(m32[i], bits & 0xffff);
    s16.exp_avg_sq_bf16[i] = Fp32ToBf16Stochastic(v32[i], bits >> 16);
  }
  return want;
}

// The update is the fp32 one on the decoded moments; the stored moments are its m and v
// rounded with this rule and these bits, bitwise, for odd lengths, misaligned starts, 1-5
// threads, a span split into two calls at an odd point, and indices that cross 2^32 (where
// the key changes).
TEST_P(AdamRoundingIsaTest, Bf16MomentsAreTheFp32UpdateRoundedWithThisRuleForAnySplit) {
  const uint64_t seed = MixRoundingSeed(17, 2);
  for (size_t n : {size_t{1}, size_t{15}, size_t{37}, size_t{1031}, size_t{200003}}) {
    for (uint64_t index0 : {uint64_t{0}, uint64_t{77}, (uint64_t{1} << 32) - n / 2 - 1}) {
      for (size_t shift : {size_t{0}, size_t{3}}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " index0=" << index0 << " shift=" << shift
                                        << " isa=" << AdamIsaDescription());
        const Bf16State before(n, static_cast<uint32_t>(n + shift), shift);
        const Bf16State want = ExpectedUpdate(before, seed, index0);
        for (int threads : {1, 2, 5}) {
          for (size_t cut : {size_t{0}, n / 3 + 1}) {
            Bf16State s = before;
            const size_t c = std::min(cut, n);
            ASSERT_TRUE(AdamStep(StepFive(), s.Spans(0, c, seed, index0), {.num_threads = threads}).ok());
            ASSERT_TRUE(AdamStep(StepFive(), s.Spans(c, n - c, seed, index0), {.num_threads = threads}).ok());
            ASSERT_EQ(s.p, want.p) << threads << " threads, cut " << cut;
            ASSERT_EQ(s.m, want.m) << threads << " threads, cut " << cut;
            ASSERT_EQ(s.v, want.v) << threads << " threads, cut " << cut;
            ASSERT_EQ(s.half, want.half) << threads << " threads, cut " << cut;
          }
        }
      }
    }
  }
}

// The case: with beta2 = 0.999 and g^2 = 2 v0, v's per-step increment is 0.1% of v,
// below half a bf16 ulp (0.2-0.4%). Rounding to nearest stores v0 again every step (checked
// on the fp32 update below: v freezes); stochastic rounding follows the fp32 trajectory
// v_t = 2 v0 - v0 beta2^t on average. After 200 steps v_t = 1.18 v0; the mean over 4096
// elements must be within 0.5% of it (each element's rounding noise accumulates to about 3%
// by then, 0.05% for the mean). m (beta1 = 0.9, m0 = 0, g constant) likewise within 0.5%.
TEST_P(AdamRoundingIsaTest, VFollowsIncrementsBelowHalfAnUlp) {
  const size_t n = 4096;
  const float v0 = Bf16ToFp32(Fp32ToBf16(1e-4f)), g = std::sqrt(2 * v0);
  AdamHyperParams hp{.lr = 0.0, .beta1 = 0.9, .beta2 = 0.999};
  // Rounding to nearest: the fp32 update of v0 rounds back to v0.
  const float v1 = static_cast<float>(hp.beta2) * v0 + static_cast<float>(1 - hp.beta2) * g * g;
  ASSERT_GT(v1, v0);
  ASSERT_EQ(Fp32ToBf16(v1), Fp32ToBf16(v0)) << "the increment is not below half an ulp";

  std::vector<float> p(n, 0.5f), grad(n, g);
  std::vector<uint16_t> m(n, 0), v(n, Fp32ToBf16(v0));
  const int steps = 200;
  for (int t = 1; t <= steps; ++t) {
    hp.step = t;
    AdamSpans s;
    s.params = p, s.grad = grad, s.exp_avg_bf16 = m, s.exp_avg_sq_bf16 = v;
    s.rounding_seed = MixRoundingSeed(t, 0);
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = 2}).ok());
  }
  double v_mean = 0, m_mean = 0;
  for (size_t i = 0; i < n; ++i) v_mean += Bf16ToFp32(v[i]) / n, m_mean += Bf16ToFp32(m[i]) / n;
  const double v_want = 2.0 * v0 - v0 * std::pow(0.999, steps), m_want = g * (1 - std::pow(0.9, steps));
  EXPECT_NEAR(v_mean, v_want, 5e-3 * v_want) << "v0 " << v0;
  EXPECT_NEAR(m_mean, m_want, 5e-3 * m_want);
  EXPECT_GT(v_mean, 1.15 * v0);  // clearly moved (rounding to nearest: exactly v0)
}

INSTANTIATE_TEST_SUITE_P(AllIsas, AdamRoundingIsaTest,
                         ::testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

TEST(AdamRounding, RejectsAnIndexRangeThatOverflows) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f);
  std::vector<uint16_t> m(4, 0), v(4, 0);
  AdamSpans s;
  s.params = p, s.grad = g, s.exp_avg_bf16 = m, s.exp_avg_sq_bf16 = v;
  s.rounding_index = std::numeric_limits<uint64_t>::max() - 2;
  EXPECT_EQ(AdamStep({}, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
}

}  // namespace
}  // namespace strata
