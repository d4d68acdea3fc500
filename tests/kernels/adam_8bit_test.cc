// Adam's m and v kept in 8 bits, blockwise (strata.adam_states "8bit", Note [8-bit moments]
// in strata/cpu_adam.h): the format, its stochastic rounding, and the fused update, every ISA
// path forced in turn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "strata/cpu_adam.h"
#include "kernels/forced_isa_test.h"
#include "kernels/kernel_test_util.h"
#include "strata/isa.h"

namespace strata {
namespace {

std::vector<float> Decoded(bool is_v, const std::vector<uint8_t>& blob, size_t n) {
  std::vector<float> x(n);
  DecodeMoment8Bit(is_v, blob, x);
  return x;
}

std::vector<uint8_t> Encoded(bool is_v, const std::vector<float>& x, uint64_t seed, uint64_t index) {
  std::vector<uint8_t> blob(Moment8BitBytes(x.size()));
  EncodeMoment8Bit(is_v, x, blob, seed, index);
  return blob;
}

TEST(Moments8Bit, TakeAByteAndAScalePerBlockOf256) {
  EXPECT_EQ(Moment8BitBytes(0), 0u);
  EXPECT_EQ(Moment8BitBytes(1), 64u + 4);
  EXPECT_EQ(Moment8BitBytes(256), 256u + 4);
  EXPECT_EQ(Moment8BitBytes(257), 320u + 8);
  EXPECT_EQ(Moment8BitBytes(1 << 20), (1u << 20) + 4 * 4096);  // 1.016 B per element
}

// Each value decodes within 1/16 of itself (relative) in the normal range (7 octaves below
// the block's largest for m, 15 for v), within one step (2^-10 or 2^-18 of the largest)
// below it; the largest is exact; re-encoding the decoded values to the nearest codes gives
// the same blob.
TEST(Moments8Bit, RoundWithinAStepAndReencodeToTheSameBlob) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool is_v : {false, true}) {
    for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{1000}}) {
      std::vector<float> x(n);
      for (float& e : x) e = is_v ? std::exp(3 * normal(rng)) * 1e-6f : normal(rng) * std::exp(normal(rng)) * 1e-3f;
      const auto blob = Encoded(is_v, x, 9, 123);
      const auto y = Decoded(is_v, blob, n);
      for (size_t b = 0; b < n; b += 256) {
        const size_t e = std::min(n, b + 256);
        float amax = 0;
        for (size_t i = b; i < e; ++i) amax = std::max(amax, std::abs(x[i]));
        const float normal_floor = amax * (is_v ? 0x1p-14f : 0x1p-6f), step = amax * (is_v ? 0x1p-18f : 0x1p-10f);
        for (size_t i = b; i < e; ++i) {
          SCOPED_TRACE(testing::Message() << "v=" << is_v << " n=" << n << " i=" << i << " x=" << x[i]);
          if (std::abs(x[i]) == amax) {
            EXPECT_EQ(y[i], x[i]);
          }
          if (std::abs(x[i]) >= normal_floor) {
            EXPECT_LE(std::abs(y[i] - x[i]), std::abs(x[i]) / 16 * 1.0001f);
          } else {
            EXPECT_LE(std::abs(y[i] - x[i]), step * 1.0001f);
          }
          if (y[i] != 0) {
            EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
          }
        }
      }
      std::vector<uint8_t> again(blob.size());
      EncodeMoment8BitNearest(is_v, y, again);
      EXPECT_EQ(again, blob) << "v=" << is_v << " n=" << n;
    }
  }
}

// Stochastic rounding: the mean of many encodings (one element, different indices) is the
// value, in the normal and the evenly spaced range; rounding to nearest would be off by up to
// half a step (1/32 relative).
TEST(Moments8Bit, RoundingIsUnbiased) {
  const int k = 1 << 14;
  for (bool is_v : {false, true}) {
    for (float rel : {0.7123f, 0.0301f, 0.001237f, 0.0000213f}) {
      double sum = 0;
      for (int i = 0; i < k; ++i) {
        std::vector<float> x = {1.0f, is_v ? rel : -rel};  // the block's largest is 1
        sum += Decoded(is_v, Encoded(is_v, x, 3, static_cast<uint64_t>(i) * 256), 2)[1];
      }
      const double mean = std::abs(sum / k), step = rel >= (is_v ? 0x1p-14 : 0x1p-6) ? rel / 16 : (is_v ? 0x1p-18 : 0x1p-10);
      EXPECT_NEAR(mean, rel, 6 * step / (2 * std::sqrt(k))) << "v=" << is_v << " rel=" << rel;
    }
  }
}

class Adam8BitIsaTest : public ForcedIsaTest {};

struct State8Bit {
  State8Bit(size_t n, uint32_t seed) : n(n), p(n), g(n), half(n), m(Moment8BitBytes(n)), v(Moment8BitBytes(n)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<float> m32(n), v32(n);
    for (size_t i = 0; i < n; ++i) {
      p[i] = uni(rng);
      g[i] = 0.05f * uni(rng);
      m32[i] = 0.01f * uni(rng);
      v32[i] = 1e-4f * std::abs(uni(rng)) * std::exp(6 * uni(rng)) + (i % 97 == 0 ? 0.0f : 1e-12f);
    }
    EncodeMoment8Bit(false, m32, m, 1, 0);
    EncodeMoment8Bit(true, v32, v, 1, 0);
  }
  AdamSpans Spans(uint64_t seed, uint64_t index0) {
    AdamSpans s;
    s.params = p;
    s.grad = g;
    s.half_out = half;
    s.exp_avg_8bit = m;
    s.exp_avg_sq_8bit = v;
    s.rounding_seed = seed;
    s.rounding_index = index0;
    return s;
  }
  size_t n;
  std::vector<float> p, g;
  std::vector<uint16_t> half;
  std::vector<uint8_t> m, v;
};

using kernel_test::StepFive;

// The update is, bitwise: the moments decoded, a v that decoded to 0 replaced by m^2, the
// fp32 update of the same ISA, m and v encoded with the bits EncodeMoment8Bit takes; for
// lengths around the block size, 1-5 threads and indices that cross 2^32.
TEST_P(Adam8BitIsaTest, IsTheFp32UpdateOfTheDecodedMomentsEncodedBack) {
  const uint64_t seed = MixRoundingSeed(17, 2);
  for (size_t n : {size_t{1}, size_t{255}, size_t{257}, size_t{70001}}) {
    for (uint64_t index0 : {uint64_t{0}, uint64_t{77}, (uint64_t{1} << 32) - n / 2 - 1}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " index0=" << index0 << " isa=" << AdamIsaDescription());
      const State8Bit before(n, static_cast<uint32_t>(n));
      State8Bit want = before;
      std::vector<float> m32 = Decoded(false, before.m, n), v32 = Decoded(true, before.v, n);
      for (size_t i = 0; i < n; ++i)
        if (v32[i] == 0) v32[i] = m32[i] * m32[i];
      AdamSpans wide;
      wide.params = want.p, wide.grad = want.g, wide.half_out = want.half, wide.exp_avg = m32, wide.exp_avg_sq = v32;
      ASSERT_TRUE(AdamStep(StepFive(), wide, {.num_threads = 1}).ok());
      EncodeMoment8Bit(false, m32, want.m, seed, index0);
      EncodeMoment8Bit(true, v32, want.v, seed, index0);
      for (int threads : {1, 2, 5}) {
        State8Bit s = before;
        ASSERT_TRUE(AdamStep(StepFive(), s.Spans(seed, index0), {.num_threads = threads}).ok());
        ASSERT_EQ(s.p, want.p) << threads << " threads";
        ASSERT_EQ(s.half, want.half) << threads << " threads";
        ASSERT_EQ(s.m, want.m) << threads << " threads";
        ASSERT_EQ(s.v, want.v) << threads << " threads";
      }
    }
  }
}

// An element whose v is below its block's range (decodes to 0) while m is not: the update
// takes v = m^2, so it moves p by about lr, not by m / eps (1e5 lr here).
TEST_P(Adam8BitIsaTest, AVBelowItsRangeDoesNotTurnTheUpdateIntoMOverEps) {
  std::vector<float> m32 = {1e-3f, 1e-3f}, v32 = {1e-6f, 1e-20f};  // v[1] is 2^-46 of the block's largest
  State8Bit s(2, 1);
  EncodeMoment8Bit(false, m32, s.m, 1, 0);
  EncodeMoment8Bit(true, v32, s.v, 1, 0);
  ASSERT_EQ(Decoded(true, s.v, 2)[1], 0.0f);
  s.p = {0.5f, 0.5f};
  s.g = {0.0f, 0.0f};
  AdamHyperParams hp{.lr = 1e-3, .step = 1000};
  ASSERT_TRUE(AdamStep(hp, s.Spans(1, 0)).ok());
  EXPECT_LT(std::abs(s.p[1] - 0.5f), 2e-3f);
}

// 8-bit moments learn as fp32 ones do: 400 steps of noisy least squares (4096 weights, the
// gradient (p - target) + noise, lr 1e-2), the mean squared error to the target against fp32
// moments' after the same steps: within 10%, and both far below the start.
TEST_P(Adam8BitIsaTest, LearnAsFp32MomentsOnNoisyLeastSquares) {
  const size_t n = 4096;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> target(n);
  for (float& t : target) t = 0.5f * normal(rng);
  auto run = [&](bool eight) {
    std::vector<float> p(n, 0.0f), g(n), m(n, 0.0f), v(n, 0.0f);
    std::vector<uint8_t> m8(Moment8BitBytes(n), 0), v8(Moment8BitBytes(n), 0);
    std::mt19937 noise(7);
    for (int step = 1; step <= 400; ++step) {
      for (size_t i = 0; i < n; ++i) g[i] = (p[i] - target[i]) + 0.3f * normal(noise);
      AdamSpans s;
      s.params = p;
      s.grad = g;
      if (eight) s.exp_avg_8bit = m8, s.exp_avg_sq_8bit = v8, s.rounding_seed = static_cast<uint64_t>(step);
      else s.exp_avg = m, s.exp_avg_sq = v;
      EXPECT_TRUE(AdamStep({.lr = 1e-2, .step = step}, s).ok());
    }
    double err = 0;
    for (size_t i = 0; i < n; ++i) err += (p[i] - target[i]) * (p[i] - target[i]);
    return err / n;
  };
  double start = 0;
  for (float t : target) start += t * t / n;
  const double fp32 = run(false), eight = run(true);
  EXPECT_LT(fp32, start / 10);
  EXPECT_LT(eight, fp32 * 1.1) << "fp32 moments " << fp32 << ", start " << start;
}

INSTANTIATE_TEST_SUITE_P(Isa, Adam8BitIsaTest, ::testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace strata
