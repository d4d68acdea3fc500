#include "bench/adam_peers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "bench/bench_util.h"
#include "strata/log.h"

#if STRATA_HAVE_TORCH
#include <torch/optim/adamw.h>
#include <torch/version.h>
#endif

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

namespace strata::bench {

// ---- LibTorch -------------------------------------------------------------------------
#if STRATA_HAVE_TORCH
namespace {

class LibTorchAdamW final : public AdamPeer {
 public:
  LibTorchAdamW(uint64_t n, int threads) {
    torch::set_num_threads(threads);
    param_ = torch::empty({static_cast<int64_t>(n)}, torch::kFloat32).uniform_(-1, 1).set_requires_grad(true);
    param_.mutable_grad() = torch::empty_like(param_).uniform_(-1e-2, 1e-2);
    half_ = torch::empty({static_cast<int64_t>(n)}, torch::kBFloat16);
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{param_},
        torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
    optimizer_->step();  // allocates exp_avg / exp_avg_sq
  }
  StatusOr<double> TimedStep(bool with_bf16_copy) override {
    const double t0 = NowSeconds();
    optimizer_->step();
    if (with_bf16_copy) half_.copy_(param_.detach());
    return NowSeconds() - t0;
  }
  std::string Describe() const override {
    return fmt::format("LibTorch {}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  }

 private:
  torch::Tensor param_, half_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

}  // namespace

StatusOr<std::unique_ptr<AdamPeer>> MakeLibTorchAdamW(uint64_t params, int threads) {
  try {
    return std::unique_ptr<AdamPeer>(new LibTorchAdamW(params, threads));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("LibTorch AdamW: ") + e.what());
  }
}
#else
StatusOr<std::unique_ptr<AdamPeer>> MakeLibTorchAdamW(uint64_t, int) {
  return Status(StatusCode::kUnavailable, "built without LibTorch (STRATA_WITH_TORCH=OFF)");
}
#endif

// ---- DeepSpeed, a child process --------------------------------------------------------
namespace {

class DeepSpeedChild final : public AdamPeer {
 public:
  ~DeepSpeedChild() override {
    if (to_child_ >= 0) {
      (void)!write(to_child_, "quit\n", 5);
      close(to_child_);
    }
    if (from_child_ >= 0) close(from_child_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  Status Start(const std::string& python, const std::string& script, uint64_t n, int threads,
               const std::string& optimizer) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe for DeepSpeed peer");
    const std::string n_arg = std::to_string(n), t_arg = std::to_string(threads);
    pid_ = fork();
    if (pid_ < 0) return ErrnoError(errno, "fork for DeepSpeed peer");
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      // Torch's import-time warnings (no CUDA runtime, ...) would break up the table; the
      // child reports real failures on stdout ("error ..."). STRATA_LOG=debug keeps them.
      if (LogThreshold() > LogLevel::kDebug) {
        const int null_fd = open("/dev/null", O_WRONLY);
        if (null_fd >= 0) dup2(null_fd, 2);
      }
      const char* argv[] = {python.c_str(), script.c_str(),  "--params",        n_arg.c_str(), "--threads",
                            t_arg.c_str(),  "--optimizer",   optimizer.c_str(), nullptr};
      execvp(argv[0], const_cast<char* const*>(argv));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
    // Allocation of N parameters in Python and, the first time, the JIT build of the op.
    auto line = ReadLine(/*timeout_s=*/600);
    if (!line.ok()) return line.status();
    if (line->rfind("ready", 0) != 0) return Status(StatusCode::kUnavailable, "DeepSpeed peer: " + *line);
    version_ = line->size() > 6 ? line->substr(6) : "?";
    return Status::Ok();
  }

  StatusOr<double> TimedStep(bool with_bf16_copy) override {
    const std::string cmd = with_bf16_copy ? "step_copy\n" : "step\n";
    if (write(to_child_, cmd.data(), cmd.size()) != static_cast<ssize_t>(cmd.size()))
      return ErrnoError(errno, "writing to the DeepSpeed peer");
    auto line = ReadLine(/*timeout_s=*/120);
    if (!line.ok()) return line.status();
    char* end = nullptr;
    const double s = std::strtod(line->c_str(), &end);
    if (end == line->c_str()) return Status(StatusCode::kInternal, "DeepSpeed peer said: " + *line);
    return s;
  }
  std::string Describe() const override { return "DeepSpeed " + version_; }

 private:
  // Lines other than the protocol's (DeepSpeed logs to stdout) are skipped: a reply starts
  // with a digit, "ready" or "error".
  StatusOr<std::string> ReadLine(int timeout_s) {
    const double deadline = NowSeconds() + timeout_s;
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        if (!line.empty() && (isdigit(static_cast<unsigned char>(line[0])) || line.rfind("ready", 0) == 0 ||
                              line.rfind("error", 0) == 0))
          return line;
        continue;
      }
      pollfd pfd{from_child_, POLLIN, 0};
      const int left_ms = static_cast<int>((deadline - NowSeconds()) * 1000);
      if (left_ms <= 0) return Status(StatusCode::kUnavailable, "DeepSpeed peer: no answer within time limit");
      if (poll(&pfd, 1, left_ms) < 0 && errno != EINTR) return ErrnoError(errno, "poll on DeepSpeed peer");
      char chunk[4096];
      const ssize_t got = read(from_child_, chunk, sizeof(chunk));
      if (got == 0) return Status(StatusCode::kUnavailable, "DeepSpeed peer exited");
      if (got > 0) buffer_.append(chunk, static_cast<size_t>(got));
    }
  }

  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_, version_;
};

}  // namespace

StatusOr<std::unique_ptr<AdamPeer>> MakeDeepSpeedCpuAdam(const std::string& python, const std::string& script,
                                                         uint64_t params, int threads, const std::string& optimizer) {
  signal(SIGPIPE, SIG_IGN);  // a dead child must surface as an error, not kill the bench
  auto child = std::make_unique<DeepSpeedChild>();
  STRATA_RETURN_IF_ERROR(child->Start(python, script, params, threads, optimizer));
  return std::unique_ptr<AdamPeer>(std::move(child));
}

std::string DefaultPeerPython() {
  if (const char* env = std::getenv("STRATA_PYTHON")) return env;
  const std::string venv = std::string(STRATA_SOURCE_DIR) + "/.venv/bin/python";
  return access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

std::string DefaultDeepSpeedScript() { return STRATA_SOURCE_DIR "/bench/deepspeed_adam.py"; }

}  // namespace strata::bench
