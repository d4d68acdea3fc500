// libFuzzer target: `strata estimate` with its flags and a config. Input, split at NUL bytes:
// the flags ("--params 7e9 --host-memory 64G --disk-free 1T --device-memory 80G --nproc 2
// --device cuda --machine h100 --max --max-seq"), then a ds_config text, then --set overrides.
// The calls are the command's (src/cli/estimate_cmd.cc) on a fixed "this machine": every input
// must end as an estimate or a Status, never a crash or an internal check.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "src/config/train_config.h"
#include "src/estimate/estimate_flags.h"
#include "src/estimate/estimator.h"
#include "src/estimate/expert_traffic.h"
#include "src/settle/fit_advice.h"
#include "src/settle/largest_fit.h"
#include "src/estimate/longest_sequence.h"
#include "src/estimate/step_time.h"
#include "src/estimate/step_traffic.h"
#include "src/settle/settle.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace strata;

struct Flags {
  EstimateFlags checked;
  int nproc = 1;
  std::string device, machine;
  bool max = false, max_seq = false;
};

// The flags as the command line would give them; false where it would refuse them.
bool ParseFlags(const std::string& text, Flags* f) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--max") { f->max = true; continue; }
    if (w == "--max-seq") { f->max_seq = true; continue; }
    if (i + 1 >= words.size()) return false;
    const std::string& v = words[++i];
    if (w == "--params") {
      char* end = nullptr;
      f->checked.params = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0') return false;
    } else if (w == "--nproc") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > (1 << 20)) return false;  // CLI::Range(1, 1 << 20)
      f->nproc = static_cast<int>(n);
    } else if (w == "--device") {
      if (v != "cpu" && v != "cuda" && v != "auto") return false;
      f->device = v;
    } else if (w == "--machine") {
      f->machine = v;
    } else if (w == "--host-memory" || w == "--disk-free" || w == "--device-memory") {
      auto bytes = bench::ParseBytes(v, w);
      if (!bytes.ok()) return false;
      (w == "--host-memory" ? f->checked.host_memory : w == "--disk-free" ? f->checked.disk_free
                                                                           : f->checked.device_memory) = *bytes;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::SplitAtNul(data, size);
  if (parts.size() < 2) return 0;
  Flags f;
  if (!ParseFlags(parts[0], &f) || !CheckEstimateFlags(f.checked).ok()) return 0;
  std::vector<std::string> sets(parts.begin() + 2, parts.end());
  if (!f.device.empty()) sets.push_back("strata.device=" + f.device);
  if (f.checked.device_memory) sets.push_back("strata.device_memory=" + std::to_string(*f.checked.device_memory));
  auto text = ApplyOverrides(parts[1], sets);
  if (!text.ok()) return 0;
  auto written = ParseTrainConfig(*text, "fuzz.json");
  if (!written.ok()) return 0;
  MachineRates rates;
  const bool nominal = !f.machine.empty() && f.machine != "here";
  if (nominal) {
    auto r = NominalMachine(f.machine);
    if (!r.ok()) return 0;
    rates = *r;
    written->device = "cuda";
    if (written->device_memory == 0) written->device_memory = rates.device_memory;
  }
  const bool gpu = written->device.rfind("cuda", 0) == 0;  // (SpecNamesGpu, "auto" as on a machine without a GPU)
  const MachineCapacity here{uint64_t{64} << 30, uint64_t{1} << 40, "/fuzz/swap", written->device_memory};
  const MachineCapacity m = PlannedMachine(here, f.checked);
  const int64_t params = ScaledParameters(f.checked);
  auto settled = SettleRunConfig(*written, {f.nproc, f.nproc, gpu, {!gpu}, &m, params});
  if (!settled.ok()) return 0;
  const SettledConfig& cfg = *settled->config;
  const MemoryEstimate& e = settled->estimate;
  (void)FormatEstimate(e);
  // The searches below settle the config dozens of times: bounded here, so that one input
  // stays well inside the fuzzer's time limit.
  const bool small = cfg.model.n_layer <= 16 && f.nproc <= 64;
  if (!small) return 0;
  const ShardPlan plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model, params), f.nproc, 0, {!gpu});
  (void)EstimateLinkTraffic(cfg, plan);
  (void)EstimateStepTraffic(cfg, plan);
  (void)FormatExpertTraffic(cfg, plan);
  if (!CheckFits(e, m, f.nproc).ok()) (void)FitAdvice(cfg, f.nproc, params, {!gpu}, m, f.nproc);
  if (f.max) (void)FindLargestFit(cfg, f.nproc, {!gpu}, m);
  if (f.max_seq) (void)FindLongestSequence(SettledFitsAtLength(*written, {f.nproc, f.nproc, gpu, {!gpu}, &m, params}));
  if (nominal) (void)FormatPrediction(PredictStepTime(cfg, plan, rates), rates);
  return 0;
}
