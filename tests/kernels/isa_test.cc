#include "strata/isa.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Isa, ForcingClampsToWhatTheCpuHas) {
  SetForcedIsa(IsaLevel::kScalar);
  EXPECT_EQ(ActiveIsa(), IsaLevel::kScalar);
  SetForcedIsa(IsaLevel::kAvx512);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
  ClearForcedIsa();
}

TEST(Isa, ParsesNames) {
  IsaLevel l;
  EXPECT_TRUE(ParseIsa("avx2", &l));
  EXPECT_EQ(l, IsaLevel::kAvx2);
  EXPECT_FALSE(ParseIsa("sse", &l));
  EXPECT_STREQ(IsaName(IsaLevel::kAvx512), "avx512");
}

}  // namespace
}  // namespace strata
