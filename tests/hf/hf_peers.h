// The Python side of the Hugging Face interop tests (tests/hf/hf_models.py run by
// STRATA_PYTHON), shared by hf_test.cc, generate_hf_test.cc and hf_lora_test.cc: one call of the
// script, and fixture bases that skip, with the reason, where transformers (or peft) is not
// installed; with STRATA_REQUIRE_PEERS=1 (scripts/test.sh, so CI) they fail instead, so that
// a comparison that did not run is never taken for one that passed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace strata::testing {

// Runs `hf_models.py ARGS`; its exit code (-1 if it could not run), stdout + stderr in `out`.
inline int RunHfModels(const std::string& args, std::string* out = nullptr) {
  const std::string cmd =
      std::string(STRATA_PYTHON) + " " STRATA_SOURCE_DIR "/tests/hf/hf_models.py " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int rc = pclose(p);
  if (out) *out = text;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Where the peers are required (STRATA_REQUIRE_PEERS=1), a missing one fails the test.
inline void PeersMissing(const std::string& why) {
  const char* required = std::getenv("STRATA_REQUIRE_PEERS");
  if (required && std::string(required) == "1") {
    GTEST_FAIL() << why << " (STRATA_REQUIRE_PEERS=1)";
  } else {
    GTEST_SKIP() << why;
  }
}

// A test parametrised by architecture name that needs torch + transformers + safetensors.
class HfPeersTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string out;
    if (RunHfModels("check", &out) != 0)
      PeersMissing(std::string("Python peers not installed (") + STRATA_PYTHON +
                   " cannot import torch + transformers + safetensors; run scripts/setup_hf.sh): " + out);
  }
};

// The same, for tests that also need peft (the LoRA adapter exports).
class HfPeftTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string out;
    if (RunHfModels("check peft", &out) != 0)
      PeersMissing(std::string("Python peers not installed (") + STRATA_PYTHON +
                   " cannot import torch + transformers + safetensors + peft; run scripts/setup_hf.sh): " + out);
  }
};

}  // namespace strata::testing
