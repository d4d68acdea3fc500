// The Python side of the Hugging Face interop tests (tests/hf/hf_models.py run by
// STRATA_PYTHON), shared by hf_test.cc, generate_hf_test.cc and hf_lora_test.cc: one call of the
// script, and fixture bases that skip, with the reason, where transformers (or peft) is not
// installed, or fail where the peers are required (support/peers.h).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support/peers.h"
#include "support/warm_python.h"

namespace strata::testing {

// Runs `hf_models.py ARGS` (through the warm Python: support/warm_python.h); its exit code (-1
// if it could not run), stdout + stderr in `out`.
inline int RunHfModels(const std::string& args, std::string* out = nullptr) {
  return RunPythonScript(STRATA_PYTHON, STRATA_SOURCE_DIR "/tests/hf/hf_models.py", args, out);
}

// Skips, or fails where the peers are required, unless `hf_models.py check EXTRA` succeeds.
inline void RequireHfPeers(const std::string& extra, const std::string& what) {
  std::string out;
  if (RunHfModels("check" + extra, &out) != 0)
    PeersMissing(std::string("Python peers not installed (") + STRATA_PYTHON + " cannot find " + what +
                 "; run scripts/setup_hf.sh): " + out);
}

// A test parametrised by architecture name that needs torch + transformers + safetensors.
class HfPeersTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { RequireHfPeers("", "torch + transformers + safetensors"); }
};

// The same, for tests that also need peft (the LoRA adapter exports).
class HfPeftTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { RequireHfPeers(" peft", "torch + transformers + safetensors + peft"); }
};

}  // namespace strata::testing
