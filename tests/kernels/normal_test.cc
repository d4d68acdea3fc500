// FillNormal (Note [Normal draws]): the distribution's moments and tails, independence of
// neighbours and of streams, values that do not depend on the span's length, and bitwise the
// same values on every ISA path the CPU has.
#include "strata/normal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/isa.h"

namespace strata {
namespace {

std::vector<float> Draw(size_t n, uint64_t key, float mean = 0.0f, float std = 1.0f) {
  std::vector<float> v(n);
  FillNormal(v, mean, std, key);
  return v;
}

TEST(Normal, MomentsAndTailsAreThoseOfAStandardNormal) {
  const std::vector<float> v = Draw(4'000'000, NormalStreamKey(1234, 7));
  double sum = 0, sq = 0, fourth = 0;
  size_t beyond2 = 0, beyond3 = 0, beyond4 = 0;
  float largest = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sq += double(x) * x;
    fourth += double(x) * x * x * x;
    beyond2 += std::fabs(x) > 2;
    beyond3 += std::fabs(x) > 3;
    beyond4 += std::fabs(x) > 4;
    largest = std::max(largest, std::fabs(x));
  }
  const double n = static_cast<double>(v.size()), mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(fourth / n, 3.0, 5 * std::sqrt(96.0 / n));  // kurtosis of a normal; Var(z^4) = 96
  // P(|z| > k) for k = 2, 3, 4, within 5 standard errors of the binomial count
  auto near = [n](size_t count, double p) { return std::fabs(count - n * p) < 5 * std::sqrt(n * p * (1 - p)) + 1; };
  EXPECT_TRUE(near(beyond2, 0.0455003)) << beyond2;
  EXPECT_TRUE(near(beyond3, 0.0026998)) << beyond3;
  EXPECT_TRUE(near(beyond4, 6.334e-5)) << beyond4;
  EXPECT_LE(largest, 5.78f);  // u1 >= 2^-24
}

TEST(Normal, NeighboursAndStreamsAreUncorrelated) {
  const size_t n = 1'000'000;
  const std::vector<float> a = Draw(n, NormalStreamKey(1, 0)), b = Draw(n, NormalStreamKey(1, 1)),
                           c = Draw(n, NormalStreamKey(2, 0));
  auto corr = [n](const float* x, const float* y, size_t len) {
    double s = 0;
    for (size_t i = 0; i < len; ++i) s += double(x[i]) * y[i];
    return s / static_cast<double>(len);
  };
  const double bound = 5 / std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(corr(a.data(), a.data() + 1, n - 1), 0, bound);    // next value
  EXPECT_NEAR(corr(a.data(), a.data() + 16, n - 16), 0, bound);  // a pair's cosine and sine
  EXPECT_NEAR(corr(a.data(), b.data(), n), 0, bound);            // the next stream
  EXPECT_NEAR(corr(a.data(), c.data(), n), 0, bound);            // another seed
  // The squares too: a cosine and its sine share a radius, which must not leak to neighbours.
  std::vector<float> a2(n);
  for (size_t i = 0; i < n; ++i) a2[i] = a[i] * a[i] - 1;
  EXPECT_NEAR(corr(a2.data(), a2.data() + 1, n - 1), 0, 3 * bound);
}

TEST(Normal, ValuesDependOnKeyAndPositionOnly) {
  const std::vector<float> whole = Draw(1000, 99);
  for (size_t len : {0, 1, 31, 32, 33, 999}) {
    const std::vector<float> part = Draw(len, 99);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin())) << len;  // (no memcmp: data() may be null)
  }
  const std::vector<float> scaled = Draw(1000, 99, 0.5f, 0.02f);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(scaled[i], 0.5f + 0.02f * whole[i]) << i;
  EXPECT_NE(Draw(8, 100), Draw(8, 99));
  EXPECT_NE(NormalStreamKey(1, 2), NormalStreamKey(2, 1));
}

TEST(Normal, EveryIsaPathGivesTheSameBits) {
  const size_t n = 100'003;  // whole chunks and a cut one
  SetForcedIsa(IsaLevel::kScalar);
  const std::vector<float> scalar = Draw(n, 5, 0.0f, 0.02f);
  for (IsaLevel level : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (DetectedIsa() < level) continue;
    SetForcedIsa(level);
    const std::vector<float> v = Draw(n, 5, 0.0f, 0.02f);
    EXPECT_EQ(0, std::memcmp(v.data(), scalar.data(), n * sizeof(float))) << IsaName(level);
  }
  ClearForcedIsa();
}

}  // namespace
}  // namespace strata
