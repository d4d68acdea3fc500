#include "src/cli/progress.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "src/estimate/estimator.h"
#include "strata/log.h"

namespace strata::cli {
namespace {

// DPO's means over a step's pairs, under the names TRL logs them by (Note [DPO]).
std::vector<std::pair<std::string, double>> DpoMeans(const model::DpoTally& t) {
  const double n = static_cast<double>(t.pairs);
  return {{"rewards/chosen", t.chosen_rewards / n},   {"rewards/rejected", t.rejected_rewards / n},
          {"rewards/margins", t.margins / n},         {"rewards/accuracies", t.accuracies / n},
          {"logps/chosen", t.chosen_logps / n},       {"logps/rejected", t.rejected_logps / n}};
}

std::string Duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

Progress::~Progress() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

Status Progress::Open() {
  if (o_.metrics_path.empty()) return Status();
  metrics_fd_ = ::open(o_.metrics_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0) return ErrnoError(errno, "cannot open metrics file '{}'", o_.metrics_path);
  struct stat st {};
  if (::fstat(metrics_fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    Message(fmt::format("metrics: appending to '{}' ({} bytes of earlier lines kept)", o_.metrics_path, st.st_size));
  return Status();
}

void Progress::WriteMetrics(const std::string& line) {
  ++metrics_lines_;
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(metrics_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == text.size()) return;
  if (metrics_lost_++ == 0) {
    metrics_errno_ = errno;
    LogWarn("metrics file '{}': cannot write ({}); this and later lost lines are counted in the summary",
            o_.metrics_path, std::strerror(metrics_errno_));
  }
}

void Progress::ClearBar() {
  if (bar_drawn_) std::fputs("\r\033[K", stdout);
  bar_drawn_ = false;
}

void Progress::Message(const std::string& line) {
  ClearBar();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::DrawBar(const StepStats& st) {
  const int64_t total = std::max<int64_t>(1, o_.total_steps - o_.first_step);
  const double frac = std::min(1.0, static_cast<double>(done_) / total);
  const int width = 30, full = static_cast<int>(frac * width);
  const double mean = all_time_ / std::max<int64_t>(1, done_);
  std::printf("\r\033[K[%s%s] %lld/%lld %3.0f%%  ETA %s  loss %.4f", std::string(full, '#').c_str(),
              std::string(width - full, '.').c_str(), (long long)(st.step + 1), (long long)o_.total_steps, 100 * frac,
              Duration(mean * (total - done_)).c_str(), st.loss);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Progress::OnStep(const StepStats& st) {
  ++done_;
  all_time_ += st.seconds;
  step_seconds_.push_back(st.seconds);
  tokens_ += st.tokens;
  skipped_ += st.skipped;
  redone_ += st.redone_blocks;
  last_loss_ = st.loss;
  read_bytes_ += st.nvme_read_bytes;
  write_bytes_ += st.nvme_write_bytes;
  const double tflops = st.tokens * o_.flops_per_token / std::max(1e-12, st.seconds) / 1e12;
  if (done_ == 1) first_wait_ = st.wait_s;
  if (done_ > 1) {  // the first step pays one-time costs
    sum_time_ += st.seconds;
    sum_wait_ += st.wait_s;
    sum_optimizer_wait_ += st.optimizer_wait_s;
    sum_flops_ += st.tokens * o_.flops_per_token;
    ++measured_;
  }
  if (metrics_fd_ >= 0) {
    nlohmann::json j = {{"step", st.step},           {"loss", st.loss},
                        {"lr", st.lr},               {"grad_norm", std::isfinite(st.grad_norm) ? nlohmann::json(st.grad_norm) : nlohmann::json(nullptr)},
                        {"loss_scale", st.loss_scale}, {"skipped", st.skipped},
                        {"tokens", st.tokens},       {"step_s", st.seconds},
                        {"tokens_per_s", st.tokens / std::max(1e-12, st.seconds)},
                        {"tflops", tflops},          {"exposed_io_s", st.wait_s},
                        {"compute_s", st.compute_s}, {"comm_s", st.comm_s},
                        {"optimizer_s", st.optimizer_s}, {"optimizer_wait_s", st.optimizer_wait_s},
                        {"nvme_read_bytes", st.nvme_read_bytes},
                        {"nvme_write_bytes", st.nvme_write_bytes}};
    if (st.experts_routed > 0) {  // Note [Expert-aware fetching]
      j["experts_routed"] = st.experts_routed;
      j["experts_fetched"] = st.experts_fetched;
    }
    if (st.dpo.pairs > 0)  // Note [DPO]: TRL's names, means over the step's pairs
      for (const auto& [name, value] : DpoMeans(st.dpo)) j[name] = value;
    if (st.speculated_blocks > 0) {
      j["speculated_blocks"] = st.speculated_blocks;
      j["redone_blocks"] = st.redone_blocks;
    }
    WriteMetrics(j.dump());
  }
  if (o_.monitors) Monitor(st, tflops);
  if (st.step % o_.steps_per_print == 0 || st.step + 1 == o_.total_steps) {
    std::string line = fmt::format(
        "train step {:5d}  loss {:.4f}  lr {:.3g}  grad norm {:.3f}{}  {:.0f} tokens/s  {:.3f} TFLOPS  step {:.1f} ms  "
        "nvme r/w {:.1f}/{:.1f} MB  exposed I/O {:.1f} ms{}",
        st.step, st.loss, st.lr, st.grad_norm, st.skipped ? " (skipped: overflow)" : "",
        st.tokens / std::max(1e-12, st.seconds), tflops, st.seconds * 1e3, st.nvme_read_bytes / 1e6,
        st.nvme_write_bytes / 1e6, st.wait_s * 1e3,
        st.optimizer_wait_s > 0 ? fmt::format(" + waiting for the optimizer {:.1f} ms", st.optimizer_wait_s * 1e3)
                                : std::string());
    if (o_.sequences_per_epoch > 0)
      line += fmt::format("  epoch {:.3f}", static_cast<double>((st.step + 1) * o_.sequences_per_step) /
                                                static_cast<double>(o_.sequences_per_epoch));
    if (st.dpo.pairs > 0)
      line += fmt::format("  rewards chosen {:.4f} rejected {:.4f} margin {:.4f} accuracy {:.3f}",
                          st.dpo.chosen_rewards / st.dpo.pairs, st.dpo.rejected_rewards / st.dpo.pairs,
                          st.dpo.margins / st.dpo.pairs, st.dpo.accuracies / st.dpo.pairs);
    if (st.speculated_blocks > 0)
      line += fmt::format("  speculated {} block(s){}", st.speculated_blocks,
                          st.redone_blocks ? fmt::format(", redone {} (clipped)", st.redone_blocks)
                          : st.skipped     ? std::string(", rolled back")
                                           : std::string());
    if (o_.wall_clock_breakdown)
      line += fmt::format("  [compute {:.1f} ms, comm {:.1f} ms, optimizer {:.1f} ms, waited for it {:.1f} ms]",
                          st.compute_s * 1e3, st.comm_s * 1e3, st.optimizer_s * 1e3, st.optimizer_wait_s * 1e3);
    Message(line);
  }
  if (o_.bar) DrawBar(st);
}

// DeepSpeed's names (its engine logs lr, and loss_scale with fp16; its pipeline engine the train
// loss; elapsed_time_ms_step with wall_clock_breakdown), then Strata's, all under Train/Samples.
void Progress::Monitor(const StepStats& st, double tflops) {
  const int64_t samples = (st.step + 1) * o_.sequences_per_step;
  std::vector<monitor::Scalar> s = {{"Train/Samples/train_loss", st.loss, samples}, {"Train/Samples/lr", st.lr, samples}};
  if (o_.fp16) s.push_back({"Train/Samples/loss_scale", st.loss_scale, samples});
  if (o_.wall_clock_breakdown) s.push_back({"Train/Samples/elapsed_time_ms_step", st.seconds * 1e3, samples});
  if (std::isfinite(st.grad_norm)) s.push_back({"Train/Samples/grad_norm", st.grad_norm, samples});
  if (st.dpo.pairs > 0)
    for (const auto& [name, value] : DpoMeans(st.dpo)) s.push_back({"Train/Samples/" + name, value, samples});
  s.push_back({"Train/Samples/tokens_per_s", st.tokens / std::max(1e-12, st.seconds), samples});
  s.push_back({"Train/Samples/tflops", tflops, samples});
  s.push_back({"Train/Samples/exposed_io_ms", st.wait_s * 1e3, samples});
  s.push_back({"Train/Samples/host_memory_bytes", static_cast<double>(ProcKilobyteField("/proc/self/status", "VmRSS:")),
               samples});
  o_.monitors->Write(std::move(s));
}

void Progress::OnEval(int64_t step, double loss, int64_t batches, const model::DpoTally& dpo) {
  std::string line = fmt::format("eval  step {:5d}  loss {:.4f} (held-out, {} batches)", step, loss, batches);
  if (dpo.pairs > 0)
    line += fmt::format("  rewards margin {:.4f} accuracy {:.3f}", dpo.margins / dpo.pairs, dpo.accuracies / dpo.pairs);
  Message(line);
  const int64_t samples = step * o_.sequences_per_step;
  std::vector<monitor::Scalar> scalars = {{"Train/Samples/eval_loss", loss, samples}};
  nlohmann::json j = {{"step", step}, {"eval_loss", loss}, {"eval_batches", batches}};
  if (dpo.pairs > 0)  // TRL's names, eval_ first (Note [DPO])
    for (const auto& [name, value] : DpoMeans(dpo)) {
      j["eval_" + name] = value;
      scalars.push_back({"Train/Samples/eval_" + name, value, samples});
    }
  if (o_.monitors) o_.monitors->Write(std::move(scalars));
  if (metrics_fd_ >= 0) WriteMetrics(j.dump());
}

void Progress::OnSave(int64_t step, const std::string& dir, double seconds) {
  Message(fmt::format("checkpoint step {} saved to {} ({:.2f} s)", step, dir, seconds));
}

// The step-time model predicts a steady step: from the run's third step on (the first pays
// one-time costs, the first two read no Adam moments: zero until the first update wrote them).
void Progress::PrintPrediction() const {
  const size_t from = step_seconds_.size() > 2 ? 2 : step_seconds_.size() - 1;
  double sum = 0;
  for (size_t i = from; i < step_seconds_.size(); ++i) sum += step_seconds_[i];
  const double measured = sum / static_cast<double>(step_seconds_.size() - from);
  std::printf("summary: step time %.3g s measured (mean of steps %lld..%lld), %.3g s predicted by the step-time model "
              "(bound by %s): %+.0f%%\n",
              measured, (long long)(o_.first_step + static_cast<int64_t>(from)),
              (long long)(o_.first_step + static_cast<int64_t>(step_seconds_.size()) - 1), o_.predicted_step_s,
              o_.predicted_binding.c_str(), 100.0 * (o_.predicted_step_s - measured) / measured);
}

void Progress::Finish() {
  ClearBar();
  if (done_ == 0) {
    std::printf("summary: no steps run (start step %lld, steps %lld)\n", (long long)o_.first_step,
                (long long)o_.total_steps);
  } else {
    // Means leave out the first step (one-time costs) unless it is the only one.
    const double mean = measured_ > 0 ? sum_time_ / measured_ : all_time_ / done_;
    const double wait = measured_ > 0 ? sum_wait_ / measured_ : first_wait_;
    const double optimizer_wait = measured_ > 0 ? sum_optimizer_wait_ / measured_ : 0;
    // What the compute thread waited for: transfers, and the optimizer (whose work, with its
    // states on NVMe, is mostly the disk's).
    const double waited = wait + optimizer_wait;
    std::printf("summary: %lld steps (%lld..%lld) in %s, final loss %.4f, mean step %.1f ms, %.0f tokens/s, %.3f "
                "TFLOPS, compute waited %.1f ms per step (%.1f%% of the step): for transfers %.1f ms, for the "
                "optimizer %.1f ms; nvme read %.1f MB / written %.1f MB%s\n",
                (long long)done_, (long long)o_.first_step, (long long)(o_.first_step + done_ - 1),
                Duration(all_time_).c_str(), last_loss_, mean * 1e3, tokens_ / all_time_,
                (measured_ > 0 ? sum_flops_ / sum_time_ : tokens_ * o_.flops_per_token / all_time_) / 1e12,
                waited * 1e3, mean > 0 ? 100 * waited / mean : 0.0, wait * 1e3, optimizer_wait * 1e3,
                read_bytes_ / 1e6, write_bytes_ / 1e6,
                (skipped_ ? fmt::format(", {} step(s) skipped on overflow", skipped_) : std::string()).c_str());
    if (redone_ > 0)
      std::printf("summary: %lld speculative block update(s) redone because their step clipped\n", (long long)redone_);
    if (o_.predicted_step_s > 0) PrintPrediction();
  }
  std::fflush(stdout);
  if (metrics_lost_ > 0)
    LogWarn("metrics file '{}': {} of {} lines were not written ({})", o_.metrics_path, metrics_lost_, metrics_lines_,
            std::strerror(metrics_errno_));
}

}  // namespace strata::cli
