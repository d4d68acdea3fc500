// Runs ranks as forked child processes of a test and collects their exit codes, so the
// multi-process communicator tests need no launcher and no separate binary.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

// Prints a failure from inside a child and returns its exit code (1).
inline int ChildFail(int rank, const std::string& what) {
  std::fprintf(stderr, "[rank %d] %s\n", rank, what.c_str());
  return 1;
}

// Forks `n` children running body(rank); returns their exit codes (128 + signal if killed).
// Children still running after `limit` are killed (code 128 + SIGKILL).
inline std::vector<int> ForkRanks(int n, std::chrono::milliseconds limit, const std::function<int(int)>& body) {
  std::fflush(nullptr);  // or buffered output would be written twice
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = body(r);
      std::fflush(nullptr);
      _exit(code);  // skip gtest's and the parent's atexit handlers
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(n), -1);
  size_t left = pids.size();
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] < 0) codes[r] = 255, --left;  // fork failed
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (left > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (codes[r] == -1) kill(pids[r], SIGKILL);
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

}  // namespace strata::testing
