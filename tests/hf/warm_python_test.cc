// The warm Python (support/warm_python.h) runs a script as a process of its own would: the same
// exit code, output, arguments (split as the shell splits them), working folder and
// environment, a script that raises or dies of a signal reported as failed; and it is warm:
// a script finds torch and transformers imported already.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "hf/hf_peers.h"
#include "support/temp_dir.h"
#include "support/warm_python.h"

namespace strata::testing {
namespace {

constexpr const char* kScript = R"(import os, sys
what = sys.argv[1]
if what == "echo":
    print("args", sys.argv[2:])
    print("cwd", os.path.basename(os.getcwd()))
    print("env", os.environ.get("WARM_PYTHON_TEST", "unset"))
    print("to stderr", file=sys.stderr)
    sys.exit(3)
if what == "raise":
    raise ValueError("raised on purpose")
if what == "signal":
    os.kill(os.getpid(), 9)
if what == "message":
    sys.exit("a message")
)";

struct Result {
  int rc;
  std::string out;
};

Result RunScript(const std::string& script, const std::string& args, bool cold) {
  setenv("STRATA_TEST_COLD_PYTHON", cold ? "1" : "0", 1);
  Result r;
  r.rc = RunPythonScript(STRATA_PYTHON, script, args, &r.out);
  unsetenv("STRATA_TEST_COLD_PYTHON");
  return r;
}

class WarmPython : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = dir_.path() + "/script.py";
    std::ofstream(script_) << kScript;
    ASSERT_EQ(chdir(dir_.path().c_str()), 0);
  }
  void TearDown() override { (void)chdir("/"); }
  TempDir dir_;
  std::string script_;
};

TEST_F(WarmPython, RunsAScriptAsAProcessOfItsOwnWould) {
  setenv("WARM_PYTHON_TEST", "seen", 1);
  for (const char* args : {"echo one 'two words' \"three\"", "raise", "signal", "message"}) {
    SCOPED_TRACE(args);
    const Result cold = RunScript(script_, args, true), warm = RunScript(script_, args, false);
    EXPECT_EQ(warm.rc, cold.rc);
    if (std::string(args).starts_with("echo")) {
      EXPECT_EQ(warm.rc, 3);
      for (const char* line : {"args ['one', 'two words', 'three']", "env seen", "to stderr"})
        EXPECT_NE(warm.out.find(line), std::string::npos) << warm.out;
      EXPECT_NE(warm.out.find("cwd " + dir_.path().substr(dir_.path().rfind('/') + 1)), std::string::npos) << warm.out;
    } else if (std::string(args) == "raise") {
      EXPECT_EQ(warm.rc, 1);
      EXPECT_NE(warm.out.find("ValueError: raised on purpose"), std::string::npos) << warm.out;
    } else if (std::string(args) == "signal") {
      EXPECT_EQ(warm.rc, 128 + 9);
    } else {
      EXPECT_EQ(warm.rc, 1);
      EXPECT_NE(warm.out.find("a message"), std::string::npos) << warm.out;
    }
  }
  unsetenv("WARM_PYTHON_TEST");
}

TEST_F(WarmPython, AScriptFindsTorchAndTransformersImported) {
  RequireHfPeers("", "torch + transformers");
  const std::string probe = dir_.path() + "/probe.py";
  std::ofstream(probe) << "import sys\nprint('warm', 'torch' in sys.modules and 'transformers' in sys.modules)\n";
  const Result warm = RunScript(probe, "", false), cold = RunScript(probe, "", true);
  ASSERT_EQ(warm.rc, 0) << warm.out;
  EXPECT_NE(warm.out.find("warm True"), std::string::npos) << warm.out;
  EXPECT_NE(cold.out.find("warm False"), std::string::npos) << cold.out;
}

}  // namespace
}  // namespace strata::testing
