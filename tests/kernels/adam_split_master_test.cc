// The fp32 master stored split into the bf16 working weights and a 16-bit low half (Note
// [Split master], strata/cpu_adam.h): the encoding, and AdamStep over it on every ISA path
// against the same step over an fp32 master.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "kernels/forced_isa_test.h"
#include "kernels/kernel_test_util.h"
#include "strata/isa.h"

namespace strata {
namespace {

using kernel_test::BitsOfFloat;
using kernel_test::FloatFromBits;

// The one value the split form cannot hold: a tie (low half 0x8000) under an even high half,
// which rounds down to that half. It is stored one ulp nearer to zero.
bool IsEvenTie(uint32_t u) { return (u & 0xffff) == 0x8000 && ((u >> 16) & 1) == 0; }

uint32_t Rebuilt(uint32_t u) {
  const float p = FloatFromBits(u);
  uint16_t w;
  int16_t lo;
  SplitMasterWeights({&p, 1}, {&w, 1}, {&lo, 1});
  EXPECT_EQ(w, Fp32ToBf16(p)) << std::hex << u;  // the working weights are the master's, rounded
  float back;
  JoinMasterWeights({&w, 1}, {&lo, 1}, {&back, 1});
  return BitsOfFloat(back);
}

TEST(SplitMaster, RebuildsEveryLowHalfExceptTheEvenTie) {
  // Every low half under odd and even high halves, both signs, from subnormals to the
  // largest finite value (which rounds up to Inf in bf16).
  for (uint32_t high : {0x0000u, 0x0001u, 0x3f80u, 0x3f81u, 0x4049u, 0x7f7eu, 0x7f7fu, 0x8000u, 0xbf80u, 0xbf81u,
                        0xff7fu}) {
    for (uint32_t low = 0; low < 0x10000; ++low) {
      const uint32_t u = (high << 16) | low;
      const uint32_t want = IsEvenTie(u) ? u - 1 : u;
      ASSERT_EQ(Rebuilt(u), want) << std::hex << u;
    }
  }
  EXPECT_EQ(Rebuilt(BitsOfFloat(INFINITY)), BitsOfFloat(INFINITY));
  EXPECT_EQ(Rebuilt(BitsOfFloat(-INFINITY)), BitsOfFloat(-INFINITY));
  EXPECT_EQ(Rebuilt(0x3f808000u), 0x3f807fffu);  // 1 + half a bf16 ulp: one fp32 ulp lower
  EXPECT_EQ(Rebuilt(0x3f818000u), 0x3f818000u);  // the tie above an odd half rounds up: exact
}

class SplitMasterIsaTest : public ForcedIsaTest {};

// Every ISA's conversions (the vector body and the tail): random bit patterns, subnormals,
// Inf and all, round trip but for the even ties, and the working weights are Fp32ToBf16's.
TEST_P(SplitMasterIsaTest, RandomPatternsRoundTrip) {
  std::mt19937 rng(5);
  const size_t n = (1 << 16) + 7;
  std::vector<float> p(n), back(n);
  std::vector<uint16_t> w(n);
  std::vector<int16_t> lo(n);
  for (float& x : p) {
    do x = FloatFromBits(rng());
    while (std::isnan(x));
  }
  p[3] = INFINITY, p[4] = -0.0f, p[5] = FloatFromBits(0x00008000u), p[6] = FloatFromBits(0x7f7fffffu);
  SplitMasterWeights(p, w, lo);
  JoinMasterWeights(w, lo, back);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = BitsOfFloat(p[i]);
    ASSERT_EQ(w[i], Fp32ToBf16(p[i])) << i << " " << std::hex << u;
    ASSERT_EQ(BitsOfFloat(back[i]), IsEvenTie(u) ? u - 1 : u) << i << " " << std::hex << u;
  }
  // In place, as creation splits its staging.
  std::vector<float> q = p;
  std::vector<uint16_t> w2(n);
  SplitMasterWeightsInPlace(q.data(), n, w2.data());
  EXPECT_EQ(w2, w);
  EXPECT_EQ(std::memcmp(q.data(), lo.data(), 2 * n), 0);
}

// One sub-group: master (already representable in split form, so that both forms start from
// the same value), gradient and moments, `shift` elements into their allocations.
struct State {
  State(size_t n, uint32_t seed, bool bf16_moments) : n(n), p(n + 8), g(n + 8), m(n + 8), v(n + 8), m16(n + 8), v16(n + 8) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (size_t i = 0; i < n + 8; ++i) {
      p[i] = uni(rng);
      if (i % 97 == 5) p[i] = FloatFromBits((BitsOfFloat(p[i]) & 0xfffe0000u) | 0x8000u);  // even ties, planted
      uint32_t u = BitsOfFloat(p[i]);
      if (IsEvenTie(u)) p[i] = FloatFromBits(u - 1);
      g[i] = 0.05f * uni(rng);
      m[i] = 0.01f * uni(rng);
      v[i] = 1e-4f * std::abs(uni(rng)) + 1e-8f;
      m16[i] = Fp32ToBf16(m[i]);
      v16[i] = Fp32ToBf16(v[i]);
    }
    this->bf16_moments = bf16_moments;
  }
  void Moments(AdamSpans& s, size_t at) {
    if (bf16_moments) s.exp_avg_bf16 = {m16.data() + at, n}, s.exp_avg_sq_bf16 = {v16.data() + at, n};
    else s.exp_avg = {m.data() + at, n}, s.exp_avg_sq = {v.data() + at, n};
    s.rounding_seed = 7;
    s.rounding_index = 11;
  }
  size_t n;
  bool bf16_moments;
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> m16, v16;
};

// The working weights the split step writes are the fp32-master step's bf16 copy, bitwise;
// its master (rebuilt) is the fp32 step's, except an even tie, one ulp nearer to zero; m and
// v are the same bits. Odd lengths, misaligned starts, 1-5 threads, fp32 and bf16 moments
// and gradients.
TEST_P(SplitMasterIsaTest, IsTheFp32MasterStepBitwiseButForEvenTies) {
  const AdamHyperParams hp{.lr = 1e-2, .weight_decay = 0.1, .step = 5, .clip_coef = 0.5};
  for (size_t n : {size_t{1}, size_t{15}, size_t{37}, size_t{1031}, size_t{200003}}) {
    for (bool bf16_moments : {false, true}) {
      for (bool bf16_grad : {false, true}) {
        for (int threads : {1, 2, 5}) {
          SCOPED_TRACE(testing::Message() << "n=" << n << " bf16 moments " << bf16_moments << " bf16 grad "
                                          << bf16_grad << " threads " << threads << " isa " << AdamIsaDescription());
          const size_t at = 3;
          State ref(n, static_cast<uint32_t>(n), bf16_moments), split = ref;
          std::vector<uint16_t> g16(n + 8), half(n + 8), w(n + 8);
          std::vector<int16_t> lo(n + 8);
          for (size_t i = 0; i < n + 8; ++i) g16[i] = Fp32ToBf16(ref.g[i]);
          SplitMasterWeights(split.p, w, lo);

          AdamSpans a;
          a.params = {ref.p.data() + at, n};
          if (bf16_grad) a.grad_bf16 = {g16.data() + at, n};
          else a.grad = {ref.g.data() + at, n};
          a.half_out = {half.data() + at, n};
          ref.Moments(a, at);
          ASSERT_TRUE(AdamStep(hp, a, {.num_threads = threads}).ok());

          AdamSpans b;
          b.master_low = {lo.data() + at, n};
          if (bf16_grad) b.grad_bf16 = {g16.data() + at, n};
          else b.grad = {split.g.data() + at, n};
          b.half_out = {w.data() + at, n};
          split.Moments(b, at);
          ASSERT_TRUE(AdamStep(hp, b, {.num_threads = threads}).ok());

          std::vector<float> rebuilt(n);
          JoinMasterWeights({w.data() + at, n}, {lo.data() + at, n}, rebuilt);
          for (size_t i = 0; i < n; ++i) {
            const uint32_t u = BitsOfFloat(ref.p[at + i]);
            ASSERT_EQ(w[at + i], half[at + i]) << i;
            ASSERT_EQ(BitsOfFloat(rebuilt[i]), IsEvenTie(u) ? u - 1 : u) << i;
          }
          ASSERT_EQ(split.m, ref.m);
          ASSERT_EQ(split.v, ref.v);
          ASSERT_EQ(split.m16, ref.m16);
          ASSERT_EQ(split.v16, ref.v16);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, SplitMasterIsaTest,
                         ::testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

TEST(SplitMaster, AdamStepRejectsAMasterGivenTwiceOrNoBf16Weights) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4, 0.0f), v(4, 0.0f);
  std::vector<uint16_t> w(4, 0x3f80);
  std::vector<int16_t> lo(4, 0);
  AdamSpans s;
  s.master_low = lo, s.grad = g, s.exp_avg = m, s.exp_avg_sq = v, s.half_out = w;
  s.params = p;
  EXPECT_EQ(AdamStep({}, s).code(), StatusCode::kInvalidArgument);  // and an fp32 master as well
  s.params = {};
  s.half_out = {w.data(), 3};
  EXPECT_EQ(AdamStep({}, s).code(), StatusCode::kInvalidArgument);  // working weights too short
  s.half_out = w;
  s.half_format = HalfFormat::kFp16;
  EXPECT_EQ(AdamStep({}, s).code(), StatusCode::kInvalidArgument);  // fp16 holds no master's high half
  EXPECT_EQ(w, std::vector<uint16_t>(4, 0x3f80));
  EXPECT_EQ(lo, std::vector<int16_t>(4, 0));
  s.half_format = HalfFormat::kBf16;
  EXPECT_TRUE(AdamStep({}, s).ok());  // 1 - 1e-3: the same bf16, a new low half
  EXPECT_EQ(w, std::vector<uint16_t>(4, 0x3f80));
  float p0;
  JoinMasterWeights({w.data(), 1}, {lo.data(), 1}, {&p0, 1});
  EXPECT_NEAR(p0, 0.999f, 1e-6f);
}

}  // namespace
}  // namespace strata
