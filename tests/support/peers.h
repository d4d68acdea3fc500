// The outside implementations the suite compares with (transformers, PEFT, DeepSpeed) run
// through STRATA_PYTHON. Where one cannot, its test skips with the reason; where the peers
// are required (STRATA_REQUIRE_PEERS=1: scripts/test.sh, so CI) it fails instead, so that a
// comparison that did not run is never taken for one that passed.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace strata::testing {

inline void PeersMissing(const std::string& why) {
  const char* required = std::getenv("STRATA_REQUIRE_PEERS");
  if (required && std::string(required) == "1") {
    GTEST_FAIL() << why << " (STRATA_REQUIRE_PEERS=1)";
  } else {
    GTEST_SKIP() << why;
  }
}

}  // namespace strata::testing
