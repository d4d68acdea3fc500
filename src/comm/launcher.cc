#include "src/comm/launcher.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/base/stop_signals.h"
#include "src/comm/socket.h"
#include "strata/check.h"
#include "strata/log.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  int rank = 0;
  bool running = false;
};

// Restores the caller's signal mask on every return path.
class SignalBlock {
 public:
  explicit SignalBlock(const sigset_t& set) { STRATA_CHECK(pthread_sigmask(SIG_BLOCK, &set, &old_) == 0) << "pthread_sigmask"; }
  ~SignalBlock() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t old_;
};

// Everything a child needs, built before fork() so the child only calls async-signal-safe
// functions (the parent may have other threads, e.g. a logger).
struct ExecImage {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<char*> argv;
};

bool IsLauncherVar(const char* entry) {
  for (const char* name : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "STRATA_LAUNCHED="}) {
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  }
  return false;
}

ExecImage MakeImage(const LaunchOptions& opts, int rank, int port, std::vector<std::string>& argv_storage) {
  ExecImage image;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!IsLauncherVar(*e)) image.env_strings.emplace_back(*e);
  }
  image.env_strings.push_back(fmt::format("RANK={}", rank));
  image.env_strings.push_back(fmt::format("WORLD_SIZE={}", opts.nproc));
  image.env_strings.push_back(fmt::format("LOCAL_RANK={}", rank));
  image.env_strings.push_back("MASTER_ADDR=127.0.0.1");
  image.env_strings.push_back(fmt::format("MASTER_PORT={}", port));
  image.env_strings.push_back(fmt::format("{}=1", kLaunchedEnvVar));
  for (auto& s : image.env_strings) image.envp.push_back(s.data());
  image.envp.push_back(nullptr);
  for (auto& s : argv_storage) image.argv.push_back(s.data());
  image.argv.push_back(nullptr);
  return image;
}

[[noreturn]] void RunChild(const ExecImage& image, const sigset_t& old_mask, pid_t parent) {
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  // Dies with the launcher, so a killed launcher leaves no orphan ranks behind.
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
  execve("/proc/self/exe", image.argv.data(), image.envp.data());
  const char msg[] = "[strata error] launcher: execve(/proc/self/exe) failed\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
  _exit(127);
}

void SignalRunning(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (c.running) kill(c.pid, sig);  // ESRCH (already exiting) is fine
  }
}

// Reaps the children that have exited; returns the code of the first failure among them.
std::optional<int> Reap(std::vector<Child>& children, bool stopping, int forwarded) {
  std::optional<int> failure;
  for (Child& c : children) {
    if (!c.running) continue;
    int status = 0;
    pid_t got = waitpid(c.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    c.running = false;
    int code = 0;
    if (got < 0) {
      LogError("launcher: waitpid for rank {} failed: {}", c.rank, std::strerror(errno));
      code = 1;
    } else if (WIFSIGNALED(status)) {
      code = 128 + WTERMSIG(status);
      // While stopping, the ranks end on the signal they were sent (their own handlers exit
      // with 128 + it); one that died of anything else is named, as a stop it did not finish.
      if (!stopping || (WTERMSIG(status) != SIGTERM && WTERMSIG(status) != forwarded))
        LogError("rank {} killed by signal {} ({}){}", c.rank, WTERMSIG(status), strsignal(WTERMSIG(status)),
                 stopping ? " while stopping" : "");
    } else {
      code = WEXITSTATUS(status);
      if (code != 0 && (!stopping || code < 128)) LogError("rank {} exited with code {}{}", c.rank, code, stopping ? " while stopping" : "");
    }
    if (code != 0 && !failure) failure = code;
  }
  return failure;
}

// SIGCHLD and the stop signals, each forwarded to the ranks (which stop cleanly on it); one the
// caller ignores stays ignored where the ranks keep it so (KeepsCallersIgnore).
sigset_t WaitedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int sig : kStopSignals) {
    struct sigaction old = {};
    if (KeepsCallersIgnore(sig) && sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&set, sig);
  }
  return set;
}

}  // namespace

bool IsLaunchedRank() {
  const char* v = std::getenv(kLaunchedEnvVar);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

int LaunchLocalRanks(const LaunchOptions& opts) {
  STRATA_CHECK(opts.nproc >= 1) << "nproc " << opts.nproc;
  STRATA_CHECK(!opts.argv.empty()) << "argv needs at least argv[0]";
  int port = opts.master_port;
  if (port == 0) {
    auto free_port = comm::FindFreePort();
    if (!free_port.ok()) {
      LogError("launcher: no free port for MASTER_PORT: {}", free_port.status().ToString());
      return 1;
    }
    port = *free_port;
  }
  std::vector<std::string> argv = opts.argv;
  std::vector<ExecImage> images;
  images.reserve(static_cast<size_t>(opts.nproc));
  for (int r = 0; r < opts.nproc; ++r) images.push_back(MakeImage(opts, r, port, argv));

  const sigset_t set = WaitedSignals();
  SignalBlock block(set);

  std::vector<Child> children(static_cast<size_t>(opts.nproc));
  const pid_t self = getpid();
  std::optional<int> result;
  bool stopping = false;
  int forwarded = 0;  // the stop signal passed on to the ranks, if any
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL what still runs after the grace
  auto stop_all = [&] {
    if (stopping) return;
    stopping = true;
    SignalRunning(children, SIGTERM);
    kill_at = Clock::now() + opts.grace;
  };
  for (int r = 0; r < opts.nproc; ++r) {
    pid_t pid = fork();
    if (pid == 0) RunChild(images[static_cast<size_t>(r)], block.old(), self);
    if (pid < 0) {
      LogError("launcher: fork for rank {} failed: {}", r, std::strerror(errno));
      result = 1;
      stop_all();
      break;
    }
    children[static_cast<size_t>(r)] = {pid, r, true};
  }
  LogInfo("launcher: {} ranks started, MASTER_PORT={}", opts.nproc, port);

  auto any_running = [&] {
    for (const Child& c : children) if (c.running) return true;
    return false;
  };
  while (any_running()) {
    timespec tick{0, 100 * 1000 * 1000};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &tick);
    if (sig > 0 && sig != SIGCHLD && !RaisedByOwnWrite(sig, &info, self)) {
      LogWarn("launcher: got {}, forwarding it to the ranks", strsignal(sig));
      forwarded = sig;
      SignalRunning(children, sig);
      if (!result) result = 128 + sig;
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + opts.grace;
      }
    }
    std::optional<int> failure = Reap(children, stopping, forwarded);
    if (failure && !result) {
      result = failure;
      stop_all();
    }
    if (Clock::now() >= kill_at) {
      for (const Child& c : children)
        if (c.running) LogWarn("launcher: rank {} did not stop within {} ms; killing it", c.rank, opts.grace.count());
      SignalRunning(children, SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  return result.value_or(0);
}

}  // namespace strata
