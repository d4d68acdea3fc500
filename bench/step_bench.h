// `strata bench step`: the training step with parameters and optimizer states offloaded to
// none / cpu / nvme, side by side on one rank, steps interleaved across the three (the
// machine drifts), reporting median step time, tokens/s, exposed transfer time, device copy
// time and NVMe bytes per step; "none" is the anchor the others are a ratio of. With a fake
// device: the synchronous schedule (the anchor) against the overlapped one, same copy costs.
#pragma once

#include <string>
#include <vector>

namespace strata::bench {

struct StepBenchOptions {
  std::string config_path;           // a ds_config.json; "" = `default_config_json`
  std::string default_config_json;   // the built-in tiny config's text
  std::vector<std::string> sets;     // --set overrides
  int steps = 8;                     // measured steps per mode (after one warm-up step)
  bool json = false;
  double peak_tflops = 0;            // for MFU; 0 = the device's stated dense peak (none on a CPU)
  // > 0: instead of the offload modes, the synchronous and the overlapped schedule on the fake
  // asynchronous device, its host<->device copies modelled at this many GB/s.
  double fake_device_gbps = 0;
  // Instead of the offload modes: the plain schedule (the optimizer after the backward,
  // waited for) against the optimizer overlapping the next forward, same config.
  bool optimizer_overlap = false;
  // Instead of the offload modes: plain LibTorch training of the same model in memory
  // (bench/libtorch_reference.h; fp32) against Strata with this config.
  bool vs_libtorch = false;
};

int RunStepBench(const StepBenchOptions& options);

}  // namespace strata::bench
