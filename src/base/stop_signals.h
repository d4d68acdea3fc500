// The signals that end a process by default and that a Strata process turns into a clean
// stop instead (its swap folders and unfinished outputs removed, exit 128 + the signal):
// Ctrl-C, kill, a closed terminal (SIGHUP), Ctrl-\ (SIGQUIT), an alarm, the user signals, a
// reader that went away (SIGPIPE: `strata train | head`), and a file-size limit sent from
// outside (SIGXFSZ; one raised by this process's own write is left to that write, which then
// fails with EFBIG and reports the file). The launcher of local ranks forwards the same list.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace strata {

inline constexpr int kStopSignals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGALRM,
                                       SIGUSR1, SIGUSR2, SIGPIPE, SIGXFSZ};

// Whether `sig` stays ignored when the caller ignores it (nohup's SIGHUP; a shell's background
// job's SIGQUIT). SIGINT and SIGTERM are always a stop, as they always were (a shell ignores
// SIGINT in its background jobs, yet `kill -INT` to a run must stop it), and so is SIGPIPE:
// ignored, a reader that went away would go unnoticed (the output's writes fail silently).
inline bool KeepsCallersIgnore(int sig) { return sig != SIGINT && sig != SIGTERM && sig != SIGPIPE; }

// Whether `info` describes a signal the kernel raised for this process's own write: a
// file-size limit (SIGXFSZ) reached by a write or an allocation of ours. That write fails with
// EFBIG, which its caller reports naming the file; the signal itself changes nothing.
inline bool RaisedByOwnWrite(int sig, const siginfo_t* info, pid_t self) {
  return sig == SIGXFSZ && info != nullptr && info->si_code == SI_USER && info->si_pid == self;
}

// The children a stop leaves to end by themselves: a monitor's client, which finishes its run
// once this process's end closes its socket (so nothing it was given is lost). A stop SIGKILLs
// every other child (a fio that would go on writing into a swap folder).
class SparedChildren {
 public:
  static void Add(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu());
    pids().push_back(pid);
  }
  static void Remove(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu());
    std::erase(pids(), pid);
  }
  static bool Has(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu());
    return std::find(pids().begin(), pids().end(), pid) != pids().end();
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<pid_t>& pids() {
    static std::vector<pid_t> p;
    return p;
  }
};

}  // namespace strata
