// The suite's Python peer scripts run through a warm Python (support/warm_python.py): one
// server per build and environment has imported torch and transformers, and forks a worker per
// run, so a comparison does not pay the imports (seconds) each time. Where the server cannot
// be reached or started, the script runs as a plain process instead; STRATA_TEST_COLD_PYTHON=1
// always does that.
#pragma once

#include <string>

namespace strata::testing {

// Runs `python SCRIPT ARGS` (ARGS split into words as the shell splits them) in the current
// folder and environment: its exit code (128 + N where signal N ended it, as a shell reports it;
// -1 if it could not run), its stdout and stderr together in `out`.
int RunPythonScript(const std::string& python, const std::string& script, const std::string& args,
                    std::string* out = nullptr);

}  // namespace strata::testing
