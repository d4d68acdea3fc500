// The monitors a DeepSpeed config's sections ask for, tensorboard, csv_monitor and wandb: the lead
// rank's scalars of each step (DeepSpeed's names, "Train/Samples/lr", and Strata's beside them),
// against the samples seen so far, as DeepSpeed's monitors write them. The files are written on
// a thread of their own, so that a slow or full disk never delays a step; a folder that cannot
// be created or written is an error when the run starts, and a write that fails later is a
// warning, once per monitor, after which its events are counted as lost, never dropped silently.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/config/train_config.h"
#include "strata/status.h"

namespace strata::monitor {

struct Scalar {
  std::string tag;  // "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // samples seen so far
};

// One monitor's files.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status Write(const Scalar& s, double wall_time) = 0;
  virtual Status Flush() = 0;
  virtual std::string Describe() const = 0;  // "tensorboard 'runs/job'"
};

// DeepSpeed's csvMonitor layout: in `folder`, one file per tag ('/' and ' ' made '_', ".csv"),
// appended to, its first row this run "step,<the tag's last part>", then "step,value" rows.
StatusOr<std::unique_ptr<Sink>> OpenCsvSink(const std::string& folder);
// One new event file in `folder` ("events.out.tfevents.<time>.<host>.<pid>.<n>"), as
// torch.utils.tensorboard's SummaryWriter names them; never one that exists.
StatusOr<std::unique_ptr<Sink>> OpenTensorBoardSink(const std::string& folder);

// `output_path`/`job_name` of a section, as DeepSpeed joins them.
std::string FolderOf(const MonitorConfig& m);

class Monitors {
 public:
  // The enabled sections' sinks, or null when none is enabled; an error names the folder.
  static StatusOr<std::unique_ptr<Monitors>> Open(const TrainConfig& cfg);
  explicit Monitors(std::vector<std::unique_ptr<Sink>> sinks);
  ~Monitors();  // writes what is queued, then closes the files

  void Write(std::vector<Scalar> scalars);  // queued for every monitor; returns at once
  void Drain();                             // waits until everything queued is written
  int64_t lost() const;                     // scalars a failed monitor did not write
  std::string Describe() const;             // the monitors and their folders, for the start-up line

 private:
  // One monitor with its queue and its writer thread: a slow one (a W&B client reading late,
  // a disk that stalls) holds up no other, as none holds up a step.
  struct Lane {
    explicit Lane(std::unique_ptr<Sink> s) : sink(std::move(s)) {}
    std::unique_ptr<Sink> sink;
    std::deque<std::pair<double, std::vector<Scalar>>> queue;  // (wall time of the Write, its scalars)
    bool busy = false, failed = false;
    std::thread thread;
  };
  void Run(Lane& lane);
  std::vector<std::unique_ptr<Lane>> lanes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t lost_ = 0;
};

}  // namespace strata::monitor
