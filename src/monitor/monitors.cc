// The tensorboard and csv_monitor sections' files (monitors.h).
#include "src/monitor/monitors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "src/monitor/tfevents.h"
#include "src/monitor/wandb_sink.h"
#include "strata/log.h"

namespace strata::monitor {
namespace fs = std::filesystem;
namespace {

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status MakeFolder(const std::string& folder, const char* section) {
  std::error_code ec;
  fs::create_directories(folder.empty() ? "." : folder, ec);
  if (ec || !fs::is_directory(folder.empty() ? "." : folder, ec))
    return Error(StatusCode::kInvalidArgument, "{}: cannot create the folder '{}': {}", section, folder,
                 ec ? ec.message() : "a file of that name is in the way");
  return Status();
}

Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "writing '{}'", path);
    done += static_cast<size_t>(n);
  }
  return Status();
}

// A double as Python's str() writes it (what DeepSpeed's csv writer puts in a cell): the
// shortest round-trip digits, and ".0" after a whole number.
std::string PythonFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

class CsvSink : public Sink {
 public:
  explicit CsvSink(std::string folder) : folder_(std::move(folder)) {}
  ~CsvSink() override {
    for (auto& [name, fd] : files_) ::close(fd);
  }
  Status Write(const Scalar& s, double) override {
    std::string name = s.tag;
    for (char& c : name)
      if (c == '/' || c == ' ') c = '_';
    auto it = files_.find(name);
    std::string row;
    if (it == files_.end()) {  // appended to, as DeepSpeed's open(.., 'a+'); the header once per run
      const std::string path = (fs::path(folder_) / (name + ".csv")).string();
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) return ErrnoError(errno, "opening '{}'", path);
      it = files_.emplace(name, fd).first;
      const size_t slash = s.tag.rfind('/');
      row = fmt::format("step,{}\r\n", slash == std::string::npos ? s.tag : s.tag.substr(slash + 1));
    }
    row += fmt::format("{},{}\r\n", s.step, PythonFloat(s.value));  // as Python's csv writer: CRLF
    return WriteAll(it->second, row, (fs::path(folder_) / (name + ".csv")).string());
  }
  Status Flush() override { return Status(); }  // (each row written through)
  std::string Describe() const override { return fmt::format("csv_monitor '{}'", folder_); }

 private:
  std::string folder_;
  std::map<std::string, int> files_;
};

class TensorBoardSink : public Sink {
 public:
  TensorBoardSink(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~TensorBoardSink() override { ::close(fd_); }
  Status Write(const Scalar& s, double wall_time) override {
    pending_ += TfRecord(ScalarEvent(wall_time, s.step, s.tag, static_cast<float>(s.value)));
    return Status();
  }
  Status Flush() override {
    Status st = WriteAll(fd_, pending_, path_);
    pending_.clear();
    return st;
  }
  std::string Describe() const override { return fmt::format("tensorboard '{}'", fs::path(path_).parent_path().string()); }

 private:
  std::string path_, pending_;
  int fd_;
};

}  // namespace

std::string FolderOf(const MonitorConfig& m) { return (fs::path(m.output_path) / m.job_name).string(); }

StatusOr<std::unique_ptr<Sink>> OpenCsvSink(const std::string& folder) {
  STRATA_RETURN_IF_ERROR(MakeFolder(folder, "csv_monitor"));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return Error(StatusCode::kInvalidArgument, "csv_monitor: cannot write into '{}': {}", folder, std::strerror(errno));
  return std::unique_ptr<Sink>(std::make_unique<CsvSink>(folder));
}

StatusOr<std::unique_ptr<Sink>> OpenTensorBoardSink(const std::string& folder) {
  STRATA_RETURN_IF_ERROR(MakeFolder(folder, "tensorboard"));
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  const double now = WallTime();
  for (int n = 0; n < 1000; ++n) {
    const std::string path = (fs::path(folder) / fmt::format("events.out.tfevents.{}.{}.{}.{}", static_cast<int64_t>(now),
                                                             host, ::getpid(), n)).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;  // never one that exists
    if (fd < 0) return Error(StatusCode::kInvalidArgument, "tensorboard: cannot create an event file in '{}': {}", folder,
                             std::strerror(errno));
    auto sink = std::make_unique<TensorBoardSink>(path, fd);
    if (Status s = WriteAll(fd, TfRecord(FileVersionEvent(now)), path); !s.ok())
      return Error(StatusCode::kInvalidArgument, "tensorboard: {}", s.message());
    return std::unique_ptr<Sink>(std::move(sink));
  }
  return Error(StatusCode::kAlreadyExists, "tensorboard: no free event file name in '{}'", folder);
}

StatusOr<std::unique_ptr<Monitors>> Monitors::Open(const TrainConfig& cfg) {
  std::vector<std::unique_ptr<Sink>> sinks;
  if (cfg.tensorboard.enabled) {
    STRATA_ASSIGN_OR_RETURN(auto s, OpenTensorBoardSink(FolderOf(cfg.tensorboard)));
    sinks.push_back(std::move(s));
  }
  if (cfg.csv_monitor.enabled) {
    STRATA_ASSIGN_OR_RETURN(auto s, OpenCsvSink(FolderOf(cfg.csv_monitor)));
    sinks.push_back(std::move(s));
  }
  if (cfg.wandb.enabled) {
    STRATA_ASSIGN_OR_RETURN(auto s, OpenWandbSink(cfg.wandb));
    sinks.push_back(std::move(s));
  }
  if (sinks.empty()) return std::unique_ptr<Monitors>();
  return std::make_unique<Monitors>(std::move(sinks));
}

Monitors::Monitors(std::vector<std::unique_ptr<Sink>> sinks) {
  for (auto& sink : sinks) lanes_.push_back(std::make_unique<Lane>(std::move(sink)));
  for (auto& lane : lanes_) lane->thread = std::thread([this, l = lane.get()] { Run(*l); });
}

Monitors::~Monitors() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& lane : lanes_) lane->thread.join();
}

void Monitors::Write(std::vector<Scalar> scalars) {
  const double now = WallTime();  // every monitor stamps the batch with the same time
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& lane : lanes_) lane->queue.emplace_back(now, scalars);
  }
  cv_.notify_all();
}

void Monitors::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] {
    for (const auto& lane : lanes_)
      if (!lane->queue.empty() || lane->busy) return false;
    return true;
  });
}

int64_t Monitors::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::string Monitors::Describe() const {
  std::string out;
  for (const auto& lane : lanes_) out += (out.empty() ? "" : ", ") + lane->sink->Describe();
  return out;
}

// A monitor's writer thread: each batch in turn, while the monitor has not failed; its first
// failure is a warning, and its later batches count as lost.
void Monitors::Run(Lane& lane) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !lane.queue.empty(); });
    if (lane.queue.empty()) return;  // stopping, and all written
    auto [now, batch] = std::move(lane.queue.front());
    lane.queue.pop_front();
    lane.busy = true;
    const bool failed = lane.failed;
    lock.unlock();
    Status s;
    if (!failed) {
      for (const Scalar& x : batch)
        if (s.ok()) s = lane.sink->Write(x, now);
      if (s.ok()) s = lane.sink->Flush();
      if (!s.ok())
        LogWarn("{}: {}; this monitor writes nothing more in this run (the training goes on)", lane.sink->Describe(),
                s.message());
    }
    lock.lock();
    if (failed || !s.ok()) {
      lane.failed = true;
      lost_ += static_cast<int64_t>(batch.size());
    }
    lane.busy = false;
    cv_.notify_all();
  }
}

}  // namespace strata::monitor
