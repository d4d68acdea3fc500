// Runs build/strata (STRATA_BINARY) with arguments and collects its output and fate.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace strata::testing {

struct CliRun {
  int exit_code = -1;
  int signal = 0;   // the signal that killed it, if any
  std::string out;  // stdout and stderr together
};

inline CliRun RunStrata(const std::string& args) {
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);  // the shell exec'ed the binary
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (r.exit_code >= 128) r.signal = r.exit_code - 128;  // the shell reports a killed child as 128 + signal
  return r;
}

}  // namespace strata::testing
