// Casts: every ISA path against the scalar reference, and the reference against exact
// expectations (round-to-nearest-even, NaN kept NaN, fp16 subnormals and overflow).
#include "strata/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "strata/isa.h"
#include "kernels/kernel_test_util.h"

namespace strata {
namespace {

using kernel_test::FloatFromBits;

TEST(Cast, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(FloatFromBits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(FloatFromBits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(FloatFromBits(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(FloatFromBits(0x7f800001)))));  // signalling NaN stays NaN
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(INFINITY)), INFINITY);
}

TEST(Cast, Fp16MatchesExactValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even -> 0
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -24)), 0x0002);  // tie to even -> 2
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xc000);
  // Every fp16 value round-trips through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(Fp32ToFp16(Fp16ToFp32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Cast, EveryIsaMatchesTheReference) {
  std::mt19937 rng(1);
  std::vector<float> src(1000003);
  for (auto& x : src) x = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), rng() % 60 - 30);
  src[5] = std::numeric_limits<float>::quiet_NaN();
  src[6] = -INFINITY;
  for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetForcedIsa(isa);
    for (size_t n : {size_t{1}, size_t{7}, size_t{15}, size_t{17}, src.size() - 1}) {
      std::vector<uint16_t> dst(n + 1, 0xdead);
      CastFp32ToBf16({src.data() + 1, n}, {dst.data() + 1, n});  // unaligned on purpose
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i + 1], Fp32ToBf16(src[i + 1])) << IsaName(isa) << " i=" << i;
      EXPECT_EQ(dst[0], 0xdead);
    }
  }
  ClearForcedIsa();
}

}  // namespace
}  // namespace strata
