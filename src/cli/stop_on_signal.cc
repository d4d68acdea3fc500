#include "src/cli/stop_on_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "strata/log.h"
#include "strata/nvme_tier.h"

namespace strata::cli {
namespace {

int g_wake[2] = {-1, -1};  // the handler writes the signal number, the watcher reads it

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  ssize_t ignored = write(g_wake[1], &b, 1);  // async-signal-safe; a full pipe means one is pending anyway
  (void)ignored;
  errno = saved;
}

[[noreturn]] void Watch() {
  unsigned char b = 0;
  while (read(g_wake[0], &b, 1) != 1) {
  }
  const int sig = b;
  LogWarn("got {}: stopping; removing this process's swap folders", strsignal(sig));
  for (const std::string& path : RemoveThisProcessSwapFolders()) LogInfo("removed swap folder '{}'", path);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(128 + sig);  // no destructors: other threads may be mid-step; files are closed by the kernel
}

}  // namespace

void StopOnSignals() {
  if (g_wake[0] >= 0 || pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) return;
  // The watcher blocks on the read end: make only the write end non-blocking.
  fcntl(g_wake[0], F_SETFL, 0);
  std::thread(Watch).detach();
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace strata::cli
