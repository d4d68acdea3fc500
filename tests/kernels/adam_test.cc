// CPU AdamW and the gradient pass, every ISA path forced in turn, against a double-precision
// reference (the CPU oracle rule: see docs/STYLE.md rule 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "kernels/forced_isa_test.h"
#include "strata/isa.h"

// The cases spell a call's spans positionally and leave the later ones (the other moment and
// master formats) at their defaults, which GCC's -Wextra would list on every line.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace strata {
namespace {

// Tolerances (one step from fp32 state, compared with the same step in double), relative to
// the magnitude of the terms that are summed (m = b1 m + (1 - b1) g can cancel, so relative
// to the result would be meaningless):
//   p: |p - ref| <= 1e-6 |ref| + 1e-5 lr          (8 ulp of p, plus 1e-5 of the update's size)
//   m: |m - ref| <= 2e-6 (b1 |m0| + (1 - b1) |g|)  (16 ulp of the larger term)
//   v: |v - ref| <= 2e-6 |ref|                     (no cancellation: both terms >= 0)
// The half copy must equal the kernel's own fp32 result rounded to nearest even, bit for bit.
constexpr double kRelTolState = 2e-6;
constexpr double kRelTolParam = 1e-6;
constexpr double kUpdateTol = 1e-5;

struct Case {
  size_t n;
  bool weight_decay;
  bool bf16_grad;
  enum Half { kNone, kBf16, kFp16 } half;
  int threads;
};

// Buffers offset by odd element counts from 64-byte alignment, differently per array, so
// that no two arrays are co-aligned and no vector load is aligned.
struct Buffers {
  explicit Buffers(size_t n)
      : p_store(n + 16), m_store(n + 16), v_store(n + 16), g_store(n + 16), g16_store(n + 16), half_store(n + 16) {}
  std::vector<float> p_store, m_store, v_store, g_store;
  std::vector<uint16_t> g16_store, half_store;
  float* p() { return p_store.data() + 1; }
  float* m() { return m_store.data() + 3; }
  float* v() { return v_store.data() + 5; }
  float* g() { return g_store.data() + 2; }
  uint16_t* g16() { return g16_store.data() + 7; }
  uint16_t* half() { return half_store.data() + 1; }
};

// AdamW in double, on the gradient exactly as the kernel sees it (bf16 decoded exactly).
void ReferenceStep(const AdamHyperParams& hp, const double* g, double* p, double* m, double* v, size_t n) {
  const double b1 = hp.beta1, b2 = hp.beta2, t = static_cast<double>(hp.step);
  const double bc1 = hp.bias_correction ? 1 - std::pow(b1, t) : 1, bc2 = hp.bias_correction ? 1 - std::pow(b2, t) : 1;
  const double scale = static_cast<double>(hp.grad_unscale) * hp.clip_coef;
  for (size_t i = 0; i < n; ++i) {
    const double gs = g[i] * scale;
    p[i] *= 1.0 - static_cast<double>(hp.lr) * hp.weight_decay;
    m[i] = b1 * m[i] + (1 - b1) * gs;
    v[i] = b2 * v[i] + (1 - b2) * gs * gs;
    p[i] -= hp.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + hp.eps);
  }
}

class AdamIsaTest : public ForcedIsaTest {
 protected:
  void RunCase(const Case& c) {
    SCOPED_TRACE(testing::Message() << "n=" << c.n << " wd=" << c.weight_decay << " bf16_grad=" << c.bf16_grad
                                    << " half=" << c.half << " threads=" << c.threads << " isa=" << AdamIsaDescription());
    Buffers b(c.n);
    std::mt19937 rng(static_cast<uint32_t>(c.n * 7 + c.half));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<double> gd(c.n), pd(c.n), md(c.n), vd(c.n);
    AdamHyperParams hp;
    hp.lr = 1e-2f;
    hp.step = 3;
    hp.weight_decay = c.weight_decay ? 0.1f : 0.0f;
    hp.grad_unscale = 1.0f / 1024;  // gradients stored as if scaled by a loss scale of 1024
    hp.clip_coef = 0.75f;
    for (size_t i = 0; i < c.n; ++i) {
      b.p()[i] = uni(rng);
      b.m()[i] = 0.01f * uni(rng);
      b.v()[i] = 1e-4f * std::abs(uni(rng));
      const float g = 1024.0f * 0.05f * uni(rng);
      if (c.bf16_grad) {
        b.g16()[i] = Fp32ToBf16(g);
        gd[i] = Bf16ToFp32(b.g16()[i]);
      } else {
        b.g()[i] = g;
        gd[i] = g;
      }
      pd[i] = b.p()[i], md[i] = b.m()[i], vd[i] = b.v()[i];
    }
    AdamSpans s;
    s.params = {b.p(), c.n};
    s.exp_avg = {b.m(), c.n};
    s.exp_avg_sq = {b.v(), c.n};
    if (c.bf16_grad) s.grad_bf16 = {b.g16(), c.n};
    else s.grad = {b.g(), c.n};
    if (c.half != Case::kNone) {
      s.half_out = {b.half(), c.n};
      s.half_format = c.half == Case::kBf16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
    }
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = c.threads}).ok());
    const std::vector<double> m0 = md;
    ReferenceStep(hp, gd.data(), pd.data(), md.data(), vd.data(), c.n);
    size_t bad = 0;
    for (size_t i = 0; i < c.n && bad < 5; ++i) {
      const bool ok_p = std::abs(b.p()[i] - pd[i]) <= kRelTolParam * std::abs(pd[i]) + kUpdateTol * hp.lr;
      const double m_terms = hp.beta1 * std::abs(m0[i]) + (1.0 - hp.beta1) * std::abs(gd[i] * hp.grad_unscale * hp.clip_coef);
      const bool ok_m = std::abs(b.m()[i] - md[i]) <= kRelTolState * m_terms + 1e-30;
      const bool ok_v = std::abs(b.v()[i] - vd[i]) <= kRelTolState * std::abs(vd[i]) + 1e-30;
      uint16_t want_half = 0;
      if (c.half == Case::kBf16) want_half = Fp32ToBf16(b.p()[i]);
      if (c.half == Case::kFp16) want_half = Fp32ToFp16(b.p()[i]);
      const bool ok_half = c.half == Case::kNone || b.half()[i] == want_half;
      if (!(ok_p && ok_m && ok_v && ok_half)) {
        ++bad;
        ADD_FAILURE() << "i=" << i << " p " << b.p()[i] << " vs " << pd[i] << ", m " << b.m()[i] << " vs " << md[i]
                      << ", v " << b.v()[i] << " vs " << vd[i] << ", half " << b.half()[i] << " vs " << want_half;
      }
    }
  }
};

TEST_P(AdamIsaTest, MatchesDoubleReferenceOverLengthsLayoutsAndVariants) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{15}, size_t{17}, size_t{1000003}}) {
    for (bool wd : {false, true}) {
      for (bool bf16 : {false, true}) {
        for (Case::Half half : {Case::kNone, Case::kBf16, Case::kFp16}) {
          RunCase({n, wd, bf16, half, /*threads=*/n > 1000 ? 3 : 1});
        }
      }
    }
  }
}

TEST_P(AdamIsaTest, ResultIsIndependentOfThreadCount) {
  // Element-wise update, same arithmetic in heads, bodies and tails: bits must not depend
  // on how the span is split.
  const size_t n = 300007;
  std::vector<float> p[3], m[3], v[3];
  std::vector<float> g(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (auto& x : g) x = uni(rng);
  const int threads[3] = {1, 2, 5};
  for (int k = 0; k < 3; ++k) {
    p[k].assign(n, 0.5f), m[k].assign(n, 0.01f), v[k].assign(n, 1e-3f);
    AdamSpans s{p[k], m[k], v[k], g, {}, {}, HalfFormat::kBf16};
    ASSERT_TRUE(AdamStep({.weight_decay = 0.01f}, s, {.num_threads = threads[k]}).ok());
  }
  EXPECT_EQ(0, std::memcmp(p[0].data(), p[1].data(), n * 4));
  EXPECT_EQ(0, std::memcmp(p[0].data(), p[2].data(), n * 4));
  EXPECT_EQ(0, std::memcmp(v[0].data(), v[2].data(), n * 4));
}

// strata.no_decay: the ranges it names take the step without weight decay, bit for bit a
// call of their own with weight_decay 0; the rest a call with it; on any thread count.
TEST_P(AdamIsaTest, NoDecayRangesAreCallsWithoutDecayBitForBit) {
  const size_t n = 70001;
  std::vector<float> g(n), p0(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (size_t i = 0; i < n; ++i) g[i] = uni(rng), p0[i] = uni(rng);
  const std::vector<std::pair<size_t, size_t>> ranges = {{0, 7}, {4099, 4100}, {33333, 50000}, {69999, 70001}};
  const AdamHyperParams hp{.lr = 0.01, .weight_decay = 0.1};
  AdamHyperParams plain = hp;
  plain.weight_decay = 0;
  // The reference: one call per piece, decayed or not.
  std::vector<float> pr = p0, mr(n, 0.01f), vr(n, 1e-3f);
  size_t at = 0;
  auto piece = [&](size_t lo, size_t hi, const AdamHyperParams& h) {
    AdamSpans s{std::span(pr).subspan(lo, hi - lo), std::span(mr).subspan(lo, hi - lo),
                std::span(vr).subspan(lo, hi - lo), std::span<const float>(g).subspan(lo, hi - lo), {}, {},
                HalfFormat::kBf16};
    ASSERT_TRUE(AdamStep(h, s, {.num_threads = 1}).ok());
  };
  for (const auto& [lo, hi] : ranges) {
    if (lo > at) piece(at, lo, hp);
    piece(lo, hi, plain);
    at = hi;
  }
  for (int threads : {1, 3}) {
    std::vector<float> p = p0, m(n, 0.01f), v(n, 1e-3f);
    AdamSpans s{p, m, v, g, {}, {}, HalfFormat::kBf16};
    s.no_decay = ranges;
    ASSERT_TRUE(AdamStep(hp, s, {.num_threads = threads}).ok());
    EXPECT_EQ(0, std::memcmp(p.data(), pr.data(), n * 4)) << threads << " thread(s)";
    EXPECT_EQ(0, std::memcmp(v.data(), vr.data(), n * 4)) << threads << " thread(s)";
  }
  // Out of order, overlapping or past the end: refused, naming the range.
  std::vector<float> p = p0, m(n), v(n);
  AdamSpans bad{p, m, v, g, {}, {}, HalfFormat::kBf16};
  const std::vector<std::pair<size_t, size_t>> overlapping = {{5, 10}, {8, 12}};
  bad.no_decay = overlapping;
  const Status st = AdamStep(hp, bad);
  EXPECT_NE(st.message().find("no_decay range 1 [8, 12)"), std::string::npos) << st.message();
}

// Gradient pass: double accumulation, so the only difference from the reference is the
// order of additions: relative error <= 1e-12 for these lengths.
TEST_P(AdamIsaTest, SumOfSquaresMatchesDoubleReference) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{17}, size_t{1000003}}) {
    std::vector<float> g(n + 3);
    std::vector<uint16_t> g16(n + 3);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> uni(-1, 1);
    double ref = 0, ref16 = 0;
    for (size_t i = 0; i < n; ++i) {
      g[i + 1] = uni(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(i % 9) - 4));
      g16[i + 3] = Fp32ToBf16(g[i + 1]);
      ref += static_cast<double>(g[i + 1]) * g[i + 1];
      const double d16 = Bf16ToFp32(g16[i + 3]);
      ref16 += d16 * d16;
    }
    const GradStats s = GradSumSquares(std::span<const float>(g.data() + 1, n), {.num_threads = 2});
    const GradStats s16 = GradSumSquares(std::span<const uint16_t>(g16.data() + 3, n), {.num_threads = 3});
    EXPECT_TRUE(s.finite && s16.finite);
    EXPECT_NEAR(s.sum_squares, ref, 1e-12 * ref) << n;
    EXPECT_NEAR(s16.sum_squares, ref16, 1e-12 * ref16) << n;
  }
}

TEST_P(AdamIsaTest, GradPassReportsPlantedNanOrInfAndLargeFiniteIsNotFlagged) {
  const size_t n = 100003;
  const float kPlants[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  for (float plant : kPlants) {
    for (size_t where : {size_t{0}, size_t{5}, n / 2 + 3, n - 1}) {
      std::vector<float> g(n, 1e-3f);
      g[where] = plant;
      EXPECT_FALSE(GradSumSquares(g, {.num_threads = 2}).finite) << plant << " at " << where;
      std::vector<uint16_t> g16(n, Fp32ToBf16(1e-3f));
      g16[where] = Fp32ToBf16(plant);
      EXPECT_FALSE(GradSumSquares(g16, {.num_threads = 2}).finite) << plant << " at " << where;
    }
  }
  std::vector<float> big(n, std::numeric_limits<float>::max());  // squares overflow fp32, not double
  EXPECT_TRUE(GradSumSquares(big).finite);
}

TEST_P(AdamIsaTest, AClipCoefficientScalesTheGradientLikeAScaledGradient) {
  const size_t n = 4099;
  std::vector<float> g(n), g_clipped(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  double sum = 0;
  for (float x : g) sum += static_cast<double>(x) * x;
  const double norm = std::sqrt(sum) * 0.5;  // grad_unscale 0.5
  const double coef = ClipCoefficient(norm, /*max_norm=*/0.1);
  ASSERT_LT(coef, 1.0);
  EXPECT_NEAR(coef, 0.1 / (norm + 1e-6), 1e-15);
  for (size_t i = 0; i < n; ++i) g_clipped[i] = static_cast<float>(g[i] * 0.5 * coef);
  std::vector<float> pa(n, 0.3f), ma(n, 0.0f), va(n, 0.0f), pb = pa, mb = ma, vb = va;
  AdamHyperParams hp{.grad_unscale = 0.5, .clip_coef = coef};
  ASSERT_TRUE(AdamStep(hp, {pa, ma, va, g, {}, {}, HalfFormat::kBf16}).ok());
  ASSERT_TRUE(AdamStep({}, {pb, mb, vb, g_clipped, {}, {}, HalfFormat::kBf16}).ok());
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(pa[i], pb[i], 1e-6f) << i;
}

// optimizer.params.bias_correction false: one AdamW update at a late step (t = 7, where bias
// correction would about halve the step) from non-zero moments, against the formula
// without correction, written out here in double:
//   m' = b1 m + (1 - b1) g,  v' = b2 v + (1 - b2) g^2,  p' = p - lr (m' / (sqrt(v') + eps) + wd p)
// (the decoupled decay on the p from before the step, as DeepSpeed's CPU AdamW applies it).
TEST_P(AdamIsaTest, WithoutBiasCorrectionAnAdamWUpdateUsesTheRawMoments) {
  const size_t n = 37;  // vector bodies and a tail
  const AdamHyperParams hp{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .step = 7,
                           .bias_correction = false};
  std::vector<float> p(n), m(n), v(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(i) - 18.0f;
    p[i] = 0.5f + 0.01f * x;
    m[i] = 0.002f * x;
    v[i] = 1e-4f * (1.0f + 0.1f * static_cast<float>(i));
    g[i] = 0.03f * x + 0.004f;
  }
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  const auto spans = [&](std::vector<float>& params, std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq) {
    AdamSpans s;
    s.params = params;
    s.exp_avg = exp_avg;
    s.exp_avg_sq = exp_avg_sq;
    s.grad = g;
    return s;
  };
  ASSERT_TRUE(AdamStep(hp, spans(p, m, v)).ok());
  for (size_t i = 0; i < n; ++i) {
    const double gi = g[i];
    const double want_m = hp.beta1 * m0[i] + (1 - hp.beta1) * gi;
    const double want_v = hp.beta2 * v0[i] + (1 - hp.beta2) * gi * gi;
    const double want_p = p0[i] - hp.lr * (want_m / (std::sqrt(want_v) + hp.eps) + hp.weight_decay * p0[i]);
    const double m_terms = hp.beta1 * std::abs(m0[i]) + (1 - hp.beta1) * std::abs(gi);
    EXPECT_NEAR(m[i], want_m, kRelTolState * m_terms + 1e-30) << i;
    EXPECT_NEAR(v[i], want_v, kRelTolState * want_v) << i;
    EXPECT_NEAR(p[i], want_p, kRelTolParam * std::abs(want_p) + kUpdateTol * hp.lr) << i;
  }
  // With the correction the same update moves p by a different amount: the flag is honoured.
  std::vector<float> pc = p0, mc = m0, vc = v0;
  AdamHyperParams corrected = hp;
  corrected.bias_correction = true;
  ASSERT_TRUE(AdamStep(corrected, spans(pc, mc, vc)).ok());
  EXPECT_GT(std::abs(pc[0] - p[0]), 100 * kUpdateTol * hp.lr);
}

// m and v kept in bf16 (strata.adam_states "bf16"): adam_rounding_test.cc.

INSTANTIATE_TEST_SUITE_P(AllIsas, AdamIsaTest,
                         ::testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

TEST(AdamStepTest, RejectsBadArgumentsWithoutTouchingState) {
  std::vector<float> p(10, 1.0f), m(10, 0.0f), v(10, 0.0f), g(10, 1.0f), short_g(9, 1.0f);
  std::vector<uint16_t> g16(10, 0);
  const auto expect_invalid = [&](const AdamHyperParams& hp, const AdamSpans& s) {
    const Status st = AdamStep(hp, s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_EQ(p, std::vector<float>(10, 1.0f));
  };
  expect_invalid({}, {p, m, v, short_g, {}, {}, HalfFormat::kBf16});  // gradient too short
  expect_invalid({}, {p, m, v, g, g16, {}, HalfFormat::kBf16});        // two gradients
  expect_invalid({}, {p, m, v, {}, {}, {}, HalfFormat::kBf16});        // no gradient
  expect_invalid({}, {p, m, std::span<float>(v).first(5), g, {}, {}, HalfFormat::kBf16});
  expect_invalid({.step = 0}, {p, m, v, g, {}, {}, HalfFormat::kBf16});
  expect_invalid({.beta2 = 1.0f}, {p, m, v, g, {}, {}, HalfFormat::kBf16});
  expect_invalid({.eps = 0.0f}, {p, m, v, g, {}, {}, HalfFormat::kBf16});
  expect_invalid({.grad_unscale = std::numeric_limits<float>::infinity()}, {p, m, v, g, {}, {}, HalfFormat::kBf16});
  EXPECT_TRUE(AdamStep({}, {}).ok());  // empty sub-group: nothing to do
}

TEST(AdamStepTest, ClipCoefficientIsOneUpToTheThreshold) {
  EXPECT_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(ClipCoefficient(1.0, 1.0), 1.0);  // at the threshold: no clipping, not even by 1e-6
  EXPECT_EQ(ClipCoefficient(5.0, 0.0), 1.0);  // 0: clipping off
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
}

TEST(AdamStepTest, WithoutBiasCorrectionFirstStepIsScaledByOneMinusBeta) {
  // Step 1, no bias correction, no decay: m = 0.1 g, v = 0.001 g^2, p -= lr m / (sqrt(v) + eps)
  std::vector<float> p(33, 0.0f), m(33, 0.0f), v(33, 0.0f), g(33, 2.0f);
  AdamHyperParams hp{.lr = 0.1, .eps = 1e-8, .bias_correction = false};
  ASSERT_TRUE(AdamStep(hp, {p, m, v, g, {}, {}, HalfFormat::kBf16}).ok());
  const double want = -0.1 * (0.1 * 2.0) / (std::sqrt(0.001 * 4.0) + 1e-8);
  for (float x : p) EXPECT_NEAR(x, want, 1e-6 * std::abs(want));
}

}  // namespace
}  // namespace strata

#pragma GCC diagnostic pop
