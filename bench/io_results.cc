#include "bench/io_results.h"

#include <algorithm>
#include <set>

namespace strata::bench {
namespace {

nlohmann::ordered_json SummaryJson(const Summary& s) {
  if (s.n == 0) return nullptr;
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

nlohmann::ordered_json BestJson(const SweepRow* row, bool store) {
  if (!row) return nullptr;
  return {{"block_bytes", row->block}, {"queue_depth", row->queue_depth},
          {"gbps", store ? row->store.median : row->fio.median}};
}

}  // namespace

double SweepRow::StoreOverFio() const {
  if (paired.n > 0) return paired.median;
  return fio.n > 0 && fio.median > 0 ? store.median / fio.median : 0;
}

const char* DirectionName(IoDirection d) { return d == IoDirection::kWrite ? "write" : "read"; }

bool SweepTable::has_fio() const {
  return std::any_of(rows.begin(), rows.end(), [](const SweepRow& r) { return r.fio.n > 0; });
}

const SweepRow* SweepTable::Find(uint32_t block, unsigned queue_depth, IoDirection direction) const {
  for (const SweepRow& r : rows)
    if (r.block == block && r.queue_depth == queue_depth && r.direction == direction) return &r;
  return nullptr;
}

const SweepRow* SweepTable::BestStore(IoDirection direction) const {
  const SweepRow* best = nullptr;
  for (const SweepRow& r : rows)
    if (r.direction == direction && r.store.n > 0 && (!best || r.store.median > best->store.median)) best = &r;
  return best;
}

const SweepRow* SweepTable::BestFio(IoDirection direction) const {
  const SweepRow* best = nullptr;
  for (const SweepRow& r : rows)
    if (r.direction == direction && r.fio.n > 0 && (!best || r.fio.median > best->fio.median)) best = &r;
  return best;
}

std::vector<uint32_t> SweepTable::Blocks() const {
  std::set<uint32_t> s;
  for (const SweepRow& r : rows) s.insert(r.block);
  return {s.begin(), s.end()};
}

std::vector<unsigned> SweepTable::QueueDepths() const {
  std::set<unsigned> s;
  for (const SweepRow& r : rows) s.insert(r.queue_depth);
  return {s.begin(), s.end()};
}

std::string SweepCsv(const SweepTable& t) {
  std::string out =
      "block_bytes,queue_depth,direction,store_gbps,store_min,store_max,rounds,fio_gbps,fio_min,fio_max,"
      "store_over_fio\n";
  for (const SweepRow& r : t.rows) {
    out += fmt::format("{},{},{},{:.4f},{:.4f},{:.4f},{},", r.block, r.queue_depth, DirectionName(r.direction),
                       r.store.median, r.store.min, r.store.max, r.store.n);
    if (r.StoreOverFio() > 0)
      out += fmt::format("{:.4f},{:.4f},{:.4f},{:.4f}\n", r.fio.median, r.fio.min, r.fio.max, r.StoreOverFio());
    else
      out += ",,,\n";
  }
  return out;
}

nlohmann::ordered_json SweepJson(const SweepTable& t) {
  nlohmann::ordered_json j;
  j["engine"] = t.engine;
  j["fio_anchor"] = t.fio_anchor.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(t.fio_anchor);
  j["bytes_per_pass"] = t.bytes_per_pass;
  j["rounds"] = t.rounds;
  j["wall_s"] = t.wall_s;
  for (IoDirection d : {IoDirection::kWrite, IoDirection::kRead}) {
    j["best"][DirectionName(d)] = {{"store", BestJson(t.BestStore(d), true)}, {"fio", BestJson(t.BestFio(d), false)}};
  }
  j["points"] = nlohmann::ordered_json::array();
  for (const SweepRow& r : t.rows) {
    const bool ratio = r.StoreOverFio() > 0;
    j["points"].push_back({{"block_bytes", r.block},
                           {"queue_depth", r.queue_depth},
                           {"direction", DirectionName(r.direction)},
                           {"store_gbps", SummaryJson(r.store)},
                           {"fio_gbps", SummaryJson(r.fio)},
                           {"store_over_fio", ratio ? nlohmann::ordered_json(r.StoreOverFio())
                                                    : nlohmann::ordered_json(nullptr)}});
  }
  return j;
}

std::string BlockLabel(uint32_t block) {
  if (block >= (1u << 20) && block % (1u << 20) == 0) return fmt::format("{}M", block >> 20);
  if (block >= (1u << 10) && block % (1u << 10) == 0) return fmt::format("{}K", block >> 10);
  return fmt::format("{}", block);
}

}  // namespace strata::bench
