// Training progress for the lead rank: every steps_per_print steps one line (step, loss,
// lr, grad norm, tokens/s, achieved TFLOPS, NVMe bytes moved each way, exposed I/O time);
// on a terminal a progress bar with ETA redrawn below the lines; `--metrics FILE.jsonl`
// one JSON object per step and one per evaluation ({"step", "eval_loss", "eval_batches"});
// a final summary. Not thread-safe; one per process.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "src/engine/engine.h"
#include "src/monitor/monitors.h"

namespace strata::cli {

struct ProgressOptions {
  int64_t first_step = 0, total_steps = 0;  // steps [first_step, total_steps) will run
  int64_t steps_per_print = 10;
  double flops_per_token = 0;  // model FLOPs per trained token (6N + attention)
  bool wall_clock_breakdown = false;
  bool bar = false;             // draw the bar (stdout is a terminal)
  std::string metrics_path;     // "" = none
  double predicted_step_s = 0;  // the step-time model's (train --predict), 0 = none
  std::string predicted_binding;
  // strata.data.epochs: the epoch the step reached is shown (0 windows: no epochs).
  int64_t sequences_per_step = 0, sequences_per_epoch = 0;
  // The tensorboard and csv_monitor sections' monitors (null: none), and whether the loss
  // scale is one (fp16) and is logged, as DeepSpeed logs it only then.
  monitor::Monitors* monitors = nullptr;
  bool fp16 = false;
};

class Progress {
 public:
  explicit Progress(ProgressOptions o) : o_(std::move(o)) {}
  ~Progress();
  // Opens the metrics file: created, or appended to (an earlier run's lines are kept).
  Status Open();
  void OnStep(const StepStats& st);
  // `dpo`: strata.objective "dpo"'s held-out pairs (none: pairs 0).
  void OnEval(int64_t step, double loss, int64_t batches, const model::DpoTally& dpo = {});
  void OnSave(int64_t step, const std::string& dir, double seconds);
  void Message(const std::string& line);  // any other line, printed above the bar
  void Finish();                          // the summary

 private:
  void ClearBar();
  void DrawBar(const StepStats& st);
  void PrintPrediction() const;
  // One line to the metrics file; a line that cannot be written is counted, and the first
  // failure is said at once (a full disk must not lose the run's telemetry silently).
  void WriteMetrics(const std::string& line);
  // The step's scalars to the monitors, against the samples seen (DeepSpeed's x axis).
  void Monitor(const StepStats& st, double tflops);
  ProgressOptions o_;
  int metrics_fd_ = -1;
  int64_t metrics_lines_ = 0, metrics_lost_ = 0;
  int metrics_errno_ = 0;
  bool bar_drawn_ = false;
  int64_t done_ = 0, measured_ = 0, tokens_ = 0, skipped_ = 0, redone_ = 0;
  double sum_optimizer_wait_ = 0;
  double sum_time_ = 0, sum_wait_ = 0, first_wait_ = 0, all_time_ = 0, last_loss_ = 0, sum_flops_ = 0;
  double read_bytes_ = 0, write_bytes_ = 0;
  std::vector<double> step_seconds_;  // every step's, in order
};

}  // namespace strata::cli
