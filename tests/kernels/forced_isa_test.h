// A test parameterised by ISA level: each case runs with that path forced (STRATA_FORCE_ISA's
// programmatic twin), skipped where the CPU lacks it. Derive, TEST_P, instantiate over levels.
#pragma once

#include <gtest/gtest.h>

#include "strata/isa.h"

namespace strata {

class ForcedIsaTest : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(DetectedIsa())) GTEST_SKIP() << "CPU lacks this ISA";
    SetForcedIsa(GetParam());
  }
  void TearDown() override { ClearForcedIsa(); }
};

}  // namespace strata
