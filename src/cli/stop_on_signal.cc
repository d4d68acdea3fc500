#include "src/cli/stop_on_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/stop_signals.h"
#include "src/base/temporaries.h"
#include "strata/log.h"
#include "strata/nvme_tier.h"

namespace strata::cli {
namespace {

int g_wake[2] = {-1, -1};  // the handler writes the signal number, the watcher reads it

// Held by the watcher from its wake-up to its _exit, and by an exit() that comes first:
// whichever ends the process, the other never runs beside it. Without it a thread returning
// from main (an error the stop itself caused) ended the process in the middle of the
// watcher's removal, leaving a half-removed swap folder.
std::mutex g_ending_mu;

void WaitForTheWatcher() { g_ending_mu.lock(); }  // never unlocked: the process is ending

void OnSignal(int sig, siginfo_t* info, void*) {
  if (RaisedByOwnWrite(sig, info, getpid())) return;  // the write fails with EFBIG and says which file
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  ssize_t ignored = write(g_wake[1], &b, 1);  // async-signal-safe; a full pipe means one is pending anyway
  (void)ignored;
  errno = saved;
}

// SIGKILLs this process's children (every thread's; not the spared ones, which end by
// themselves) and reaps them, for at most a second; whether there were any.
bool StopChildren() {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    for (pid_t pid; in >> pid;)
      if (!SparedChildren::Has(pid)) children.push_back(pid);
  }
  for (pid_t pid : children) kill(pid, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (pid_t pid : children)
    while (waitpid(pid, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return !children.empty();
}

[[noreturn]] void Watch() {
  unsigned char b = 0;
  while (read(g_wake[0], &b, 1) != 1) {
  }
  const int sig = b;
  g_ending_mu.lock();  // never unlocked: _exit below ends the process
  LogWarn("got {}: stopping; removing this process's swap folders", strsignal(sig));
  const std::vector<std::string> removed = RemoveThisProcessSwapFolders();
  // A child (bench io's fio) would go on writing into its folder, even create it again.
  if (StopChildren()) {
    std::error_code ec;
    for (const std::string& path : removed) std::filesystem::remove_all(path, ec);
  }
  for (const std::string& path : removed) LogInfo("removed swap folder '{}'", path);
  for (const std::string& path : RemoveTemporaries()) LogInfo("removed the unfinished '{}'", path);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(128 + sig);  // no destructors: other threads may be mid-step; files are closed by the kernel
}

}  // namespace

void StopOnSignals() {
  if (g_wake[0] >= 0) return;  // installed already
  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) return;
  std::atexit(WaitForTheWatcher);
  // The watcher blocks on the read end: make only the write end non-blocking.
  fcntl(g_wake[0], F_SETFL, 0);
  std::thread(Watch).detach();
  struct sigaction sa = {};
  sa.sa_sigaction = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int sig : kStopSignals) {
    struct sigaction old = {};
    if (KeepsCallersIgnore(sig) && sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace strata::cli
