#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "strata/trace.h"

namespace strata {

const char* TrackName(Track t) {
  switch (t) {
    case Track::kCompute: return "compute";
    case Track::kNvmeRead: return "nvme read";
    case Track::kNvmeWrite: return "nvme write";
    case Track::kComm: return "communication";
    case Track::kOptimizer: return "optimizer";
    case Track::kWait: return "waiting for transfers";
    case Track::kCopyIn: return "host to device";
    case Track::kCopyOut: return "device to host";
    case Track::kDeviceComm: return "device collectives";
    case Track::kOptimizerWait: return "waiting for the optimizer";
  }
  return "?";
}

void Tracer::Add(Track track, std::string name, double start_s, double end_s, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({track, std::move(name), start_s, end_s, bytes});
}

double Tracer::Total(Track track, double since) const {
  std::lock_guard<std::mutex> lock(mu_);
  double total = 0;
  for (const auto& e : events_)
    if (e.track == track && e.start_s >= since) total += e.end_s - e.start_s;
  return total;
}

double Tracer::Busy(Track track, double since) const {
  std::vector<std::pair<double, double>> spans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : events_)
      if (e.track == track && e.start_s >= since) spans.push_back({e.start_s, e.end_s});
  }
  std::sort(spans.begin(), spans.end());
  double busy = 0, cur_s = -1, cur_e = -1;
  for (auto [s, e] : spans) {
    if (s > cur_e) {
      busy += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  return busy + (cur_e - cur_s);
}

uint64_t Tracer::Bytes(Track track, double since) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t b = 0;
  for (const auto& e : events_)
    if (e.track == track && e.end_s >= since) b += e.bytes;
  return b;
}

void Tracer::Trim(double before) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(events_, [&](const TraceEvent& e) { return e.end_s < before; });
}

std::vector<TraceEvent> Tracer::Events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

Status Tracer::WriteChromeTrace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  for (int t = 0; t < kNumTracks; ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", t},
                      {"args", {{"name", TrackName(static_cast<Track>(t))}}}});
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (const auto& e : Events()) {
    nlohmann::json ev = {{"name", e.name}, {"ph", "X"}, {"pid", rank_}, {"tid", static_cast<int>(e.track)},
                         {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}};
    if (e.bytes) ev["args"] = {{"bytes", e.bytes}};
    events.push_back(std::move(ev));
  }
  std::ofstream out(path);
  if (!out) return ErrnoError(errno, "cannot write trace file '{}'", path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  if (!out) return ErrnoError(errno, "cannot write trace file '{}'", path);
  return Status();
}

}  // namespace strata
