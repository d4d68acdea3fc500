// The wandb section's client process (wandb_sink.h).
#include "src/monitor/wandb_sink.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/base/stop_signals.h"

extern char** environ;

namespace strata::monitor {
namespace {

// The client: DeepSpeed's WandbMonitor calls, one scalar a line from its standard input.
constexpr const char* kClient = R"PY(
import json, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)   # the trainer ends the run: EOF on its stdin
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
try:
    import wandb
    a = json.loads(sys.argv[1])
    run = wandb.init(project=a["project"], group=a["group"], entity=a["team"])
    print("ready", os.environ["WANDB_MODE"], os.path.dirname(run.dir), flush=True)
except BaseException as e:
    print("error", f"{type(e).__name__}: {e}".replace("\n", " "), flush=True)
    sys.exit(1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing more to say: a trainer gone never fails a print
for line in sys.stdin:
    x = json.loads(line)
    wandb.log({x["tag"]: x["value"]}, step=x["step"])
wandb.finish()
)PY";

std::string Number(double v) {  // as Python's json reads it (NaN and Infinity included)
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

class WandbSink : public Sink {
 public:
  WandbSink(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  WandbSink(const WandbSink&) = delete;
  WandbSink& operator=(const WandbSink&) = delete;
  ~WandbSink() override { Close(); }
  void set_where(std::string where) { where_ = std::move(where); }
  void Kill() { ::kill(pid_, SIGKILL); }  // (a client that never answered)

  Status Write(const Scalar& s, double) override {
    pending_ += fmt::format("{{\"tag\": {}, \"step\": {}, \"value\": {}}}\n", nlohmann::json(s.tag).dump(), s.step,
                            Number(s.value));
    return Status();
  }
  Status Flush() override {
    size_t done = 0;
    while (done < pending_.size()) {  // a socket: a client gone is EPIPE, not SIGPIPE
      const ssize_t n = ::send(fd_, pending_.data() + done, pending_.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        pending_.clear();
        return ErrnoError(errno, "the wandb client stopped reading");
      }
      done += static_cast<size_t>(n);
    }
    pending_.clear();
    return Status();
  }
  std::string Describe() const override { return "wandb " + where_; }

 private:
  // The client finishes its run once the socket is closed; one that hangs is killed after a minute.
  void Close() {
    ::shutdown(fd_, SHUT_WR);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    SparedChildren::Remove(pid_);
    ::close(fd_);
  }

  pid_t pid_;
  int fd_;
  std::string where_, pending_;
};

// The client's first line, "ready MODE FOLDER" or "error WHY", within `seconds`.
StatusOr<std::string> FirstLine(int fd, int seconds) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Error(StatusCode::kUnavailable, "no answer in {} s", seconds);
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError(errno, "waiting for the wandb client");
    if (r == 0) continue;
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error(StatusCode::kUnavailable, "it exited{}", line.empty() ? "" : ": " + line);
    line.append(buf, static_cast<size_t>(n));
  }
  return line.substr(0, line.find('\n'));
}

}  // namespace

StatusOr<std::unique_ptr<Sink>> OpenWandbSink(const WandbConfig& c) {
  const char* env = std::getenv("STRATA_PYTHON");
  const std::string python = env && *env ? env : "python3";
  const std::string mend = fmt::format(
      "wandb.enabled needs a Python with the wandb package ({}; set STRATA_PYTHON to another, or `pip install "
      "wandb`), or set wandb.enabled false", python);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return ErrnoError(errno, "wandb: socketpair");
  const nlohmann::json args = {{"project", c.project},
                               {"group", c.group.empty() ? nlohmann::json() : nlohmann::json(c.group)},
                               {"team", c.team.empty() ? nlohmann::json() : nlohmann::json(c.team)}};
  const std::string arg = args.dump();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  char* argv[] = {const_cast<char*>(python.c_str()), const_cast<char*>("-u"), const_cast<char*>("-c"),
                  const_cast<char*>(kClient), const_cast<char*>(arg.c_str()), nullptr};
  // A process group of its own: the terminal's interrupt (and a launcher's signal to the group)
  // reaches the trainer only, which then ends the client's run by closing the socket.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, python.c_str(), &actions, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return Error(StatusCode::kFailedPrecondition, "wandb: cannot start '{}': {}; {}", python, std::strerror(spawned), mend);
  }
  auto sink = std::make_unique<WandbSink>(pid, fds[0]);  // (reaps the client on every path)
  SparedChildren::Add(pid);  // a stop of the run leaves it to finish its run (the socket closes)
  StatusOr<std::string> first = FirstLine(fds[0], 120);
  if (!first.ok() || first->rfind("ready ", 0) != 0) {
    if (!first.ok()) sink->Kill();
    const std::string why = first.ok() ? first->substr(first->find(' ') + 1) : first.status().message();
    return Error(StatusCode::kFailedPrecondition, "wandb: the client did not start ({}): {}", why, mend);
  }
  const std::string rest = first->substr(6);  // "MODE FOLDER"
  const size_t space = rest.find(' ');
  sink->set_where(fmt::format("{} '{}'", rest.substr(0, space), rest.substr(space + 1)));
  return std::unique_ptr<Sink>(std::move(sink));
}

}  // namespace strata::monitor
