// Tracer: timed spans on named tracks, written as Chrome trace JSON (opens in Perfetto or
// chrome://tracing). The step's figures (exposed transfer time, bytes per link) are
// computed from the same spans, so the picture and the numbers cannot disagree.
// Threading: Add/Span are thread-safe (the I/O pump thread records NVMe spans).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "strata/status.h"

namespace strata {

// kCopyIn / kCopyOut / kDeviceComm: the compute device's copy and collective queues (a
// GPU's streams; the fake device's worker threads), so their overlap with compute is a picture.
// kOptimizerWait: the compute thread waiting for the optimizer thread (its exposed time).
enum class Track {
  kCompute, kNvmeRead, kNvmeWrite, kComm, kOptimizer, kWait, kCopyIn, kCopyOut, kDeviceComm, kOptimizerWait
};
inline constexpr int kNumTracks = 10;
const char* TrackName(Track t);

struct TraceEvent {
  Track track;
  std::string name;
  double start_s;  // seconds since the tracer's epoch
  double end_s;
  uint64_t bytes = 0;
};

class Tracer {
 public:
  explicit Tracer(int rank = 0) : rank_(rank), epoch_(std::chrono::steady_clock::now()) {}

  double Now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count(); }
  void Add(Track track, std::string name, double start_s, double end_s, uint64_t bytes = 0);

  // RAII span: records [construction, destruction) on `track`.
  class Span {
   public:
    Span(Tracer* t, Track track, std::string name) : t_(t), track_(track), name_(std::move(name)), start_(t ? t->Now() : 0) {}
    ~Span() {
      if (t_) t_->Add(track_, std::move(name_), start_, t_->Now());
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Tracer* t_;
    Track track_;
    std::string name_;
    double start_;
  };

  // Seconds covered by spans of `track` that started at or after `since` (spans on one
  // track of one thread do not overlap; NVMe spans may, so use Busy() for those).
  double Total(Track track, double since = 0) const;
  // Seconds during which at least one span of `track` was open, since `since`.
  double Busy(Track track, double since = 0) const;
  // Bytes moved by spans of `track` that ended at or after `since`: a transfer still in
  // flight when a step ends is counted in the step during which it completes, so per-step
  // sums add up to every byte moved.
  uint64_t Bytes(Track track, double since = 0) const;
  // Drops events that ended before `before` (keeps memory bounded over long runs).
  void Trim(double before);
  // Writes {"traceEvents": [...]} with one thread (track) per Track, process = rank.
  Status WriteChromeTrace(const std::string& path) const;
  std::vector<TraceEvent> Events() const;

 private:
  int rank_;
  std::chrono::steady_clock::time_point epoch_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
};

}  // namespace strata
