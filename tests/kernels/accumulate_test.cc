// AccumulateGradient (Note [Gradient accumulation]): every ISA path and thread count against
// a per-element reference of the rule itself, std::fma then round to nearest even: bit for
// bit, so that a gradient accumulates the same on any machine CI lands on.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "strata/cast.h"
#include "strata/cpu_adam.h"
#include "kernels/kernel_test_util.h"
#include "strata/isa.h"

namespace strata {
namespace {

using kernel_test::BitsOfFloat;

std::vector<float> Gradient(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& x : g) x = normal(gen) * std::exp2(static_cast<float>(static_cast<int>(gen() % 40) - 20));
  g[0] = 1e-40f;  // a subnormal: the integer rounding keeps it (the AVX512_BF16 instruction would not)
  g[1] = -0.0f;
  return g;
}

class AccumulateTest : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override { SetForcedIsa(GetParam()); }
  void TearDown() override { ClearForcedIsa(); }
};

// Odd lengths leave a tail after the SIMD body; unaligned starts leave a head.
TEST_P(AccumulateTest, Fp32IsOneFusedMultiplyAdd) {
  for (size_t n : {size_t{1}, size_t{37}, size_t{1000003}}) {
    for (int threads : {1, 2, 3}) {
      const std::vector<float> part = Gradient(n + 1, 7), start = Gradient(n + 1, 8);
      std::vector<float> acc(start.begin() + 1, start.end());
      const std::span<const float> p(part.data() + 1, n);
      const float scale = 0.125f / 3;
      AccumulateGradient(std::span<float>(acc), p, scale, /*overwrite=*/false, {.num_threads = threads});
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(BitsOfFloat(acc[i]), BitsOfFloat(std::fma(scale, p[i], start[i + 1]))) << "n " << n << " element " << i;
    }
  }
}

TEST_P(AccumulateTest, Bf16RoundsTheFusedSumToNearestEven) {
  const size_t n = 100003;
  const std::vector<float> part = Gradient(n, 3), start = Gradient(n, 4);
  std::vector<uint16_t> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = Fp32ToBf16(start[i]);
  const std::vector<uint16_t> before = acc;
  AccumulateGradient(std::span<uint16_t>(acc), part, 0.5f, /*overwrite=*/false, {.num_threads = 2});
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(acc[i], Fp32ToBf16(std::fma(0.5f, part[i], Bf16ToFp32(before[i])))) << "element " << i;
}

// A bf16 part (a bf16 parameter gradient, Note [Accumulation in place]) gives what its exact
// widening to fp32 gives through the fp32 path, into fp32 and bf16 accumulators, written or added.
TEST_P(AccumulateTest, Bf16PartIsItsWideningThroughTheFp32Path) {
  for (size_t n : {size_t{2}, size_t{37}, size_t{100003}}) {  // (Gradient writes two special values)
    const std::vector<float> values = Gradient(n, 9), start = Gradient(n, 10);
    std::vector<uint16_t> part(n);
    std::vector<float> widened(n);
    for (size_t i = 0; i < n; ++i) {
      part[i] = Fp32ToBf16(values[i]);
      widened[i] = Bf16ToFp32(part[i]);
    }
    for (bool overwrite : {false, true}) {
      std::vector<float> a = start, b = start;
      std::vector<uint16_t> a16(n), b16(n);
      for (size_t i = 0; i < n; ++i) a16[i] = b16[i] = Fp32ToBf16(start[i]);
      AccumulateBf16Gradient(std::span<float>(a), part, 0.3f, overwrite, {.num_threads = 2});
      AccumulateGradient(std::span<float>(b), widened, 0.3f, overwrite, {.num_threads = 2});
      AccumulateBf16Gradient(std::span<uint16_t>(a16), part, 0.3f, overwrite, {.num_threads = 2});
      AccumulateGradient(std::span<uint16_t>(b16), widened, 0.3f, overwrite, {.num_threads = 2});
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(BitsOfFloat(a[i]), BitsOfFloat(b[i])) << "n " << n << " element " << i;
        ASSERT_EQ(a16[i], b16[i]) << "n " << n << " element " << i;
      }
    }
  }
}

// The step's first micro-batch writes: whatever the accumulator held (here NaN) is gone, and
// the result is what adding to zeroed memory gives (a zero sum is +0, as 0 + -0 is).
TEST_P(AccumulateTest, OverwriteIgnoresTheOldContents) {
  const size_t n = 4099;
  const std::vector<float> part = Gradient(n, 5);
  std::vector<float> acc(n, std::numeric_limits<float>::quiet_NaN()), zeroed(n, 0.0f);
  std::vector<uint16_t> acc16(n, 0x7fc0), zeroed16(n, 0);
  AccumulateGradient(std::span<float>(acc), part, 0.25f, /*overwrite=*/true);
  AccumulateGradient(std::span<float>(zeroed), part, 0.25f, /*overwrite=*/false);
  AccumulateGradient(std::span<uint16_t>(acc16), part, 0.25f, /*overwrite=*/true);
  AccumulateGradient(std::span<uint16_t>(zeroed16), part, 0.25f, /*overwrite=*/false);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(BitsOfFloat(acc[i]), BitsOfFloat(zeroed[i])) << i;
    ASSERT_EQ(acc16[i], zeroed16[i]) << i;
  }
  EXPECT_EQ(BitsOfFloat(acc[1]), BitsOfFloat(0.0f));  // 0.25 x -0 + 0
}

// An overflowing micro-batch stays visible to the gradient pass: Inf and NaN pass through.
TEST_P(AccumulateTest, NonFiniteValuesPropagate) {
  std::vector<float> part(40, 1.0f), acc(40, 0.0f);
  std::vector<uint16_t> acc16(40, 0);
  part[3] = std::numeric_limits<float>::infinity();
  part[33] = std::numeric_limits<float>::quiet_NaN();
  AccumulateGradient(std::span<float>(acc), part, 1.0f, false);
  AccumulateGradient(std::span<uint16_t>(acc16), part, 1.0f, false);
  EXPECT_TRUE(std::isinf(acc[3]));
  EXPECT_TRUE(std::isnan(acc[33]));
  EXPECT_TRUE(std::isinf(Bf16ToFp32(acc16[3])));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(acc16[33])));
  EXPECT_FALSE(GradSumSquares(std::span<const float>(acc)).finite);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, AccumulateTest,
                         ::testing::Values(IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace strata
