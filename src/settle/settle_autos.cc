#include "src/settle/settle_autos.h"

#include "src/settle/settle_keys.h"

namespace strata {

namespace {

// strata.block_inputs as written, where it applies (WrittenBlockInputs); "auto": off the
// host, host where the device has no room for them (known memory). With recompute.
void ResolveBlockInputs(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                        const MachineCapacity& m) {
  cfg->block_inputs_at = WrittenBlockInputs(*cfg, device.host);
  if (cfg->block_inputs || cfg->recompute == Recompute::kNever) return;
  SettledConfig c = *cfg;
  c.keep_activations = false;
  if (!device.host && m.device_memory > 0 &&
      EstimateMemory(c, world, params_override, device).device_peak() > m.device_memory) {
    cfg->block_inputs_at = c.block_inputs_at = BlockInputsAt::kHost;
    RecordAuto(cfg, "strata.block_inputs", "host",
               "the block inputs would not fit the device: copied to host memory after each block's forward, "
               "back before its backward");
  }
}

// "auto", last resort (after the schedule's own fallback): nvme, with a swap folder, where
// host memory has no room for the block inputs and the swap file makes the run fit.
void ResolveBlockInputsOnDisk(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                              const MachineCapacity& m, int local_ranks) {
  if (cfg->block_inputs || cfg->recompute == Recompute::kNever) return;
  SettledConfig c = *cfg;
  c.keep_activations = false;
  const auto fits_host = [&] {
    return CheckFits(EstimateMemory(c, world, params_override, device), m, local_ranks).ok();
  };
  if (!HasSwapFolder(*cfg) || m.host_available == 0 || fits_host()) return;
  c.block_inputs_at = BlockInputsAt::kNvme;
  if (!fits_host()) return;  // no help: the run is refused with the inputs where they were
  cfg->block_inputs_at = BlockInputsAt::kNvme;
  RecordAuto(cfg, "strata.block_inputs", "nvme",
             "the block inputs would not fit host memory: written to the swap file after each block's forward, "
             "read back one visit ahead of the backward");
}

}  // namespace

MemoryEstimate EstimateResolvingAutos(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                      const MachineCapacity& m, int local_ranks) {
  ResolveBlockInputs(cfg, world, params_override, device, m);
  // "auto" chose layer-major (ResolveSchedule): where its every-micro-batch block inputs alone
  // make the run not fit (wherever they wait), micro-batch-major it is.
  if (cfg->layer_major && cfg->schedule_setting == StepSchedule::kAuto && !cfg->fuse_micro_batches) {
    SettledConfig layer = *cfg, micro = *cfg;
    layer.keep_activations = micro.keep_activations = cfg->recompute == Recompute::kNever;
    micro.layer_major = false;
    if (!CheckFits(EstimateMemory(layer, world, params_override, device), m, local_ranks).ok() &&
        CheckFits(EstimateMemory(micro, world, params_override, device), m, local_ranks).ok()) {
      cfg->layer_major = false;
      RecordAuto(cfg, "strata.schedule", "micro_batch",
                 "every micro-batch's block inputs, which layer-major keeps, would not fit this machine");
    }
  }
  ResolveBlockInputsOnDisk(cfg, world, params_override, device, m, local_ranks);
  // Device accumulation first: with many micro-batches it saves a gradient copy over the link
  // and a pass over host memory per micro-batch, kept activations a recompute per block.
  // Only the device's memory decides (the host's is the same either way); unknown: no.
  SettledConfig on_device = *cfg;
  on_device.keep_activations = cfg->recompute == Recompute::kNever;
  on_device.accumulate_on_device = true;
  const uint64_t device_need = EstimateMemory(on_device, world, params_override, device).device_peak();
  ResolveDeviceAccumulation(cfg, device.host, m.device_memory > 0 && device_need <= m.device_memory);
  SettledConfig keep = *cfg;
  keep.keep_activations = true;
  ResolveRecompute(cfg, CheckFits(EstimateMemory(keep, world, params_override, device), m, local_ranks).ok());
  if (cfg->keep_activations) cfg->block_inputs_at = BlockInputsAt::kDevice;  // (no input is saved alone)
  return EstimateMemory(*cfg, world, params_override, device);
}

bool ResolveHostBlocks(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                       const MachineCapacity& m, int local_ranks, MemoryEstimate* estimate) {
  if (cfg->host_blocks >= 0) return false;
  cfg->host_blocks = 0;
  if (cfg->offload_optimizer.device != Tier::kNvme) return true;
  HostBlocksFit f = MostHostBlocks(*cfg, world, params_override, device, m, local_ranks);
  cfg->host_blocks = f.blocks;
  *estimate = f.estimate;
  return true;
}

MemoryEstimate EstimateSettlingAutos(SettledConfig* cfg, int world, int64_t params_override, DeviceTraits device,
                                     const MachineCapacity& m, int local_ranks, bool* host_blocks_auto) {
  MemoryEstimate e = EstimateResolvingAutos(cfg, world, params_override, device, m, local_ranks);
  const bool was_auto = ResolveHostBlocks(cfg, world, params_override, device, m, local_ranks, &e);
  if (host_blocks_auto) *host_blocks_auto = was_auto;
  return e;
}

}  // namespace strata
