// Runs build/strata (STRATA_BINARY) with arguments and collects its output and fate.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
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

// RunStrata, watched while it runs: after each chunk of output, `watch(output so far, pid)`
// may act on the process (signal it, fill its disk, kill a peer). `env` prefixes the command
// ("RANK=0 WORLD_SIZE=2 ..."); the binary is exec'ed, so `pid` is strata itself.
inline CliRun RunStrataWatching(const std::string& args,
                                const std::function<void(const std::string& out, pid_t pid)>& watch,
                                const std::string& env = "") {
  CliRun r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::execl("/bin/sh", "sh", "-c", (env + " exec " STRATA_BINARY " " + args).c_str(), nullptr);
    _exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
    r.out.append(buf, static_cast<size_t>(n));
    watch(r.out, pid);
  }
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (r.exit_code >= 128) r.signal = r.exit_code - 128;  // a clean stop on a signal exits 128 + signal
  return r;
}

// The swap folders ("strata-swap-*") under `dir`, by name.
inline std::set<std::string> SwapFolders(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find("strata-swap-") != std::string::npos) names.insert(e.path().filename());
  return names;
}

}  // namespace strata::testing
