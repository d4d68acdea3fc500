// `strata estimate`: per-rank bytes on the compute device, (pinned) CPU memory and NVMe for
// a config, and whether it fits this machine, without allocating.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/stop_on_signal.h"
#include "src/cli/train_config_cli.h"
#include "src/estimate/estimate_flags.h"
#include "src/estimate/estimator.h"
#include "src/estimate/expert_traffic.h"
#include "src/settle/fit_advice.h"
#include "src/estimate/host_blocks_fit.h"
#include "src/settle/largest_fit.h"
#include "src/estimate/longest_sequence.h"
#include "src/estimate/step_time.h"
#include "src/estimate/step_traffic.h"
#include "src/settle/settle.h"
#include "bench/bench_util.h"
#include "bench/machine_rates.h"
#include "src/device/compute_device.h"

namespace strata::cli {

namespace {

void PrintLargestFit(const SettledConfig& cfg, int nproc, DeviceTraits device, const MachineCapacity& m) {
  const LargestFit f = FindLargestFit(cfg, nproc, device, m);
  const double limit = (static_cast<double>(m.host_available) + static_cast<double>(m.nvme_free)) /
                       StateBytesPerParameter(cfg);
  std::printf("\nlargest model of this shape that fits (--max): ");
  if (f.parameters == 0) {
    std::printf("none (not even 1 M parameters)\n");
    return;
  }
  std::string placement;
  if (f.host_blocks != 0)
    placement += fmt::format(" (those of {} in host memory: strata.host_blocks auto)", HostBlocksPhrase(f.host_blocks));
  if (f.accumulator != cfg.grad_accum_dtype)
    placement += fmt::format(", with strata.gradient_accumulator {} (the config's {} accumulators, 4 B/param in host "
                             "memory, fit less)", DTypeName(f.accumulator), DTypeName(cfg.grad_accum_dtype));
  std::printf("%.3g B parameters, params on %s, optimizer states on %s%s (host %s of %s, NVMe %s of %s); the "
              "physical limit, (MemAvailable %s + free NVMe %s) / %.0f B per parameter, is %.3g B: %.0f%% of it\n",
              f.parameters / 1e9, OffloadDeviceName(f.params_on), OffloadDeviceName(f.optimizer_on), placement.c_str(),
              HumanBytes(f.estimate.node_host_bytes(nproc)).c_str(), HumanBytes(m.host_available).c_str(),
              HumanBytes(f.estimate.node_nvme_bytes(nproc)).c_str(), HumanBytes(m.nvme_free).c_str(),
              HumanBytes(m.host_available).c_str(), HumanBytes(m.nvme_free).c_str(), StateBytesPerParameter(cfg),
              limit / 1e9, 100.0 * f.parameters / limit);
  // Compressed moments are opt-in (they round m and v): told beside, never chosen. (Adam's only.)
  if (AdamStatesSetting(cfg) != "fp32" || !RuleOf(cfg.optimizer).compact_moments) return;
  SettledConfig bf16 = cfg, eight = cfg;
  SetAdamStates(&bf16, "bf16");
  SetAdamStates(&eight, "8bit");
  const int64_t with_bf16 = FindLargestFit(bf16, nproc, device, m).parameters;
  const int64_t with_8bit = CheckKeys(eight).ok() ? FindLargestFit(eight, nproc, device, m).parameters : 0;
  if (std::max(with_bf16, with_8bit) <= f.parameters * 1.01) {
    std::printf("compressed Adam moments (opt-in) fit no larger model here: m and v are not what bounds it\n");
    return;
  }
  std::string with = fmt::format("{:.3g} B with --set strata.adam_states=bf16", with_bf16 / 1e9);
  if (with_8bit > 0) with += fmt::format(", {:.3g} B with 8bit", with_8bit / 1e9);
  std::printf("with compressed Adam moments (opt-in, they round m and v): %s\n", with.c_str());
}

// With the optimizer states on NVMe, how many blocks host memory could keep instead
// (strata.host_blocks), as the estimate sees it.
void PrintHostBlocksRoom(const SettledConfig& cfg, int nproc, int64_t params, DeviceTraits device,
                         const MachineCapacity& m) {
  const HostBlocksFit f = MostHostBlocks(cfg, nproc, params, device, m, nproc);
  if (f.blocks <= cfg.host_blocks) {
    std::printf("blocks kept in host memory (strata.host_blocks): %s within %.0f%% of the available host memory\n",
                cfg.host_blocks == 0 ? "no room for any" : fmt::format("no room for more than {}", cfg.host_blocks).c_str(),
                100 * kHostBlocksFill);
    return;
  }
  std::printf("blocks kept in host memory: room for %s (--set strata.host_blocks=%lld; host memory %s needed "
              "then, NVMe %s): their step skips the disk\n",
              HostBlocksPhrase(f.blocks).c_str(),
              (long long)(f.blocks == kAllBlocks ? model::ModelSpec(cfg.model).num_blocks() : f.blocks), HumanBytes(f.estimate.node_host_bytes(nproc)).c_str(),
              HumanBytes(f.estimate.node_nvme_bytes(nproc)).c_str());
}

// " (the first N blocks in host memory)" after "optimizer states on nvme", or nothing.
std::string HostBlocksNote(const SettledConfig& cfg, bool resolved_auto) {
  if (cfg.offload_optimizer.device != Tier::kNvme || cfg.host_blocks <= 0) return "";
  return fmt::format(" ({} in host memory{})", HostBlocksPhrase(cfg.host_blocks),
                     resolved_auto ? ": strata.host_blocks auto" : "");
}

// What a step moves through the disk (per rank), and per parameter: the figure that bounds a
// step when the disk is slower than the compute.
void PrintStepTraffic(const SettledConfig& cfg, const MemoryEstimate& e, int64_t params, DeviceTraits device) {
  const double per_param = static_cast<double>(e.parameters) / e.world;
  const ShardPlan plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model, params), e.world, 0, device);
  if (!device.host) {
    const LinkTraffic l = EstimateLinkTraffic(cfg, plan);
    std::printf("device link per step (per rank): %s in (working weights%s), %s out (gradients); %.1f / %.1f B/param\n",
                HumanBytes(l.in).c_str(), l.in == l.in_all_experts ? "" : ", the routed experts at uniform routing",
                HumanBytes(l.out).c_str(), l.in / per_param, l.out / per_param);
  }
  if (cfg.grad_accum > 1)
    std::printf("schedule: %s; the blocks' inputs kept for the backward: %s (%.1f B/param), written once and read "
                "once per step, on the %s\n",
                cfg.layer_major ? "layer-major, each block's weights read once per forward and once per backward of "
                                  "the step (strata.schedule layer_major)"
                                : "micro-batch-major, each block's weights read once per forward and once per backward "
                                  "of every micro-batch (strata.schedule micro_batch)",
                HumanBytes(e.boundary_activations).c_str(), e.boundary_activations / per_param,
                cfg.block_inputs_at == BlockInputsAt::kNvme ? "NVMe swap file (strata.block_inputs nvme)"
                : device.host                               ? "host (the compute device)"
                : cfg.block_inputs_at == BlockInputsAt::kHost
                    ? "host, copied out after each block's forward (strata.block_inputs host)"
                    : "device");
  std::printf("%s", FormatExpertTraffic(cfg, plan).c_str());
  const StepTraffic t = EstimateStepTraffic(cfg, plan);
  if (t.written == 0 && t.read_at_most == 0) return;
  std::printf("NVMe traffic per step (per rank): %s written (%.1f B/param), %s read (%.1f B/param%s)%s\n",
              HumanBytes(t.written).c_str(), t.written / per_param, HumanBytes(t.read_at_most).c_str(),
              t.read_at_most / per_param, t.read_at_most == t.read_all_experts ? "" : "; the routed experts at uniform routing",
              t.read_served == t.read_at_most
                  ? ""
                  : fmt::format(", or {} when the next forward finds the update's writes in flight, as when the "
                                "disk is what the step waits for", HumanBytes(t.read_served))
                        .c_str());
}

// --machine NAME: a nominal GPU machine's rates, its blocks on its GPU and its memory for the
// fit (unless given); "here" is measured once the config is settled (PrintStepTime).
Status ForMachine(const std::string& name, TrainConfig* cfg, MachineRates* rates) {
  if (name.empty()) return Status();
  if (name == "here") {
    if (!SpecNamesGpu(cfg->device)) return Status();
    return InvalidArgument("\"here\" measures blocks on this CPU, but strata.device is \"{}\": name a GPU machine "
                           "({}) or set strata.device=cpu", cfg->device, NominalMachineNames());
  }
  STRATA_ASSIGN_OR_RETURN(*rates, NominalMachine(name));
  cfg->device = "cuda";
  if (cfg->device_memory == 0) cfg->device_memory = rates->device_memory;
  return Status();
}

// The step-time model's table for the settled config (`here`: this machine measured first).
int PrintStepTime(const std::string& name, const SettledConfig& cfg, int nproc, int64_t params, DeviceTraits device,
                  MachineRates rates) {
  if (name == "here") {
    const bool nvme = HasSwapFolder(cfg);
    StopOnSignals();  // Ctrl-C during the NVMe probe removes its swap folder
    std::fprintf(stderr, "measuring this machine (the engine on two layers, CPU Adam, memory%s)...\n",
                 nvme ? ", the NVMe tier" : "");
    auto measured = bench::MeasureThisMachine(cfg);
    if (!measured.ok()) {
      std::fprintf(stderr, "error: --machine here: %s\n", measured.status().message().c_str());
      return 1;
    }
    rates = *measured;
  }
  const ShardPlan plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model, params), nproc, 0, device);
  std::printf("\n%s", FormatPrediction(PredictStepTime(cfg, plan, rates), rates).c_str());
  return 0;
}

struct EstimateArgs {
  std::string machine;  // step time: "" = none, "here" = measured, else a nominal machine
  std::string config, strata_file;
  std::vector<std::string> sets;
  int nproc = 1;
  double params = 0;
  bool params_given = false;
  bool max = false;
  bool max_seq = false;
  std::string device;         // "" = the config's strata.device
  std::string device_memory;  // "" = the config's strata.device_memory
  std::string host_memory;    // "" = this machine's MemAvailable
  std::string disk_free;      // "" = the swap folder's free space here
};

// The flags that describe the machine and the model's size, parsed and checked.
StatusOr<EstimateFlags> ReadFlags(const EstimateArgs& a) {
  EstimateFlags f;
  if (a.params_given) f.params = a.params;
  for (auto [text, flag, field] : {std::tuple{&a.host_memory, "--host-memory", &f.host_memory},
                                   std::tuple{&a.disk_free, "--disk-free", &f.disk_free},
                                   std::tuple{&a.device_memory, "--device-memory", &f.device_memory}}) {
    if (text->empty()) continue;
    STRATA_ASSIGN_OR_RETURN(*field, bench::ParseBytes(*text, flag));
  }
  STRATA_RETURN_IF_ERROR(CheckEstimateFlags(f));
  return f;
}

// "fits this machine: yes", or no with what would make it fit; then, where host blocks were
// not settled by "auto", how many host memory has room for.
void PrintVerdict(const SettledConfig& cfg, int nproc, int64_t params, DeviceTraits device, const MachineCapacity& m,
                  const MemoryEstimate& e, bool planned, bool host_blocks_room) {
  const Status fits = CheckFits(e, m, nproc);
  const std::string verdict =
      fits.ok() ? "yes" : "no\n" + fits.message() + FitAdvice(cfg, nproc, params, device, m, nproc);
  std::printf("fits %s: %s\n", planned ? "the planned machine" : "this machine", verdict.c_str());
  if (fits.ok() && host_blocks_room) PrintHostBlocksRoom(cfg, nproc, params, device, m);
}

// --max-seq: the longest sequence at the config's micro-batch and tiers, and what stops the next.
void PrintLongestSequence(const TrainConfig& written, int nproc, int64_t params, bool gpu, const MachineCapacity& m) {
  const LongestSequence s =
      FindLongestSequence(SettledFitsAtLength(written, {nproc, nproc, gpu, {!gpu}, &m, params}), written.sequence_parallel);
  std::printf("\nlongest sequence that fits (--max-seq), micro-batch %lld, the tiers as written: ",
              static_cast<long long>(written.micro_batch));
  if (s.tokens == 0) {
    std::printf("none (not even %lld tokens)\n%s\n", static_cast<long long>(kShortestSequence), s.bound.c_str());
    return;
  }
  std::printf("%lld tokens (%.1f K): activations %s, host memory %s of %s%s\n", static_cast<long long>(s.tokens),
              s.tokens / 1024.0, HumanBytes(s.estimate.activations).c_str(),
              HumanBytes(s.estimate.node_host_bytes(nproc)).c_str(), HumanBytes(m.host_available).c_str(),
              m.device_memory ? fmt::format(", device memory {} of {}", HumanBytes(s.estimate.device_peak()),
                                            HumanBytes(m.device_memory)).c_str()
                              : "");
  if (!s.bound.empty())
    std::printf("%s more does not fit: %s\n",
                written.sequence_parallel > 1 ? fmt::format("{} tokens", written.sequence_parallel).c_str() : "one token",
                s.bound.c_str());
}

}  // namespace

int RunEstimate(const EstimateArgs& a) {
  const StatusOr<EstimateFlags> flags = ReadFlags(a);
  if (!flags.ok()) {
    std::fprintf(stderr, "error: %s\n", flags.status().message().c_str());
    return 2;
  }
  std::vector<std::string> sets = a.sets;
  if (!a.device.empty()) sets.push_back("strata.device=" + a.device);
  if (flags->device_memory) sets.push_back(fmt::format("strata.device_memory={}", *flags->device_memory));
  std::string origin;
  auto written = ReadTrainConfig(a.config, a.strata_file, sets, &origin);
  if (!written.ok()) {
    std::fprintf(stderr, "error: %s\n", written.status().message().c_str());
    return 1;
  }
  MachineRates rates;
  if (Status s = ForMachine(a.machine, &*written, &rates); !s.ok()) {
    std::fprintf(stderr, "error: --machine: %s\n", s.message().c_str());
    return 2;
  }
  const bool gpu = SpecNamesGpu(written->device);
  // On a GPU machine, the GPU train would open (the plan differs with its memory: where the
  // gradients are summed, whether activations fit); --device-memory or strata.device_memory first.
  const MachineCapacity m = PlannedMachine(ProbeMachine(*written, gpu ? VisibleDeviceMemory(written->device, 0) : 0), *flags);
  const int64_t params = ScaledParameters(*flags);
  const bool planned = flags->host_memory || flags->disk_free;
  const bool states_nvme = written->offload_optimizer.device == Tier::kNvme;
  auto settled = SettleRunConfig(*written, {a.nproc, a.nproc, gpu, {!gpu}, &m, params});
  if (!settled.ok()) {
    std::fprintf(stderr, "error: %s\n", settled.status().WithContext(origin).message().c_str());
    return 1;
  }
  const SettledConfig* cfg = &*settled->config;
  const bool host_blocks_auto = settled->host_blocks_auto;
  const MemoryEstimate& e = settled->estimate;
  if (gpu)
    std::printf("blocks on a GPU (%s): working weights of %s block(s) resident there; device memory %s\n",
                cfg->device.c_str(),
                cfg->resident_blocks >= 0 ? std::to_string(cfg->resident_blocks).c_str()
                : cfg->offload_param.device == Tier::kDevice ? "all" : "no",
                m.device_memory ? HumanBytes(m.device_memory).c_str() : "unknown (pass --device-memory)");
  std::printf("%.4g M parameters, %d rank(s), ZeRO stage %d, %s compute, micro-batch %lld x seq %lld; params on "
              "%s, optimizer states on %s%s; activations %s%s\n\n%s\n",
              e.parameters / 1e6, a.nproc, cfg->zero_stage, DTypeName(cfg->compute_dtype),
              (long long)cfg->micro_batch, (long long)cfg->model.seq_len, OffloadDeviceName(cfg->offload_param.device),
              OptimizerStatesWhere(cfg->offload_optimizer.device, !gpu).c_str(), HostBlocksNote(*cfg, host_blocks_auto).c_str(),
              cfg->keep_activations ? "kept" : "recomputed per block",
              cfg->accumulate_on_device ? "; gradients summed on the device, copied out once per step" : "",
              FormatEstimate(e).c_str());
  std::printf("%s (%d rank(s)): host memory %s needed, %s available; NVMe %s needed, %s free%s\n",
              planned ? "the planned node" : "this node", a.nproc,
              HumanBytes(e.node_host_bytes(a.nproc)).c_str(), HumanBytes(m.host_available).c_str(),
              HumanBytes(e.node_nvme_bytes(a.nproc)).c_str(),
              m.nvme_dir.empty() ? "-" : HumanBytes(m.nvme_free).c_str(),
              m.nvme_dir.empty() ? "" : (" in " + m.nvme_dir).c_str());
  PrintStepTraffic(*cfg, e, params, {!gpu});
  PrintVerdict(*cfg, a.nproc, params, {!gpu}, m, e, planned,
               states_nvme && !host_blocks_auto);
  if (a.max) PrintLargestFit(*cfg, a.nproc, {!gpu}, m);
  if (a.max_seq) PrintLongestSequence(*written, a.nproc, params, gpu, m);
  return a.machine.empty() ? 0 : PrintStepTime(a.machine, *cfg, a.nproc, params, {!gpu}, rates);
}

void AddEstimateCommand(CLI::App& app, Action* action) {
  auto a = std::make_shared<EstimateArgs>();
  auto* cmd = app.add_subcommand("estimate", "per-rank memory by tier (device / cpu / nvme) for a config, and "
                                             "whether it fits this machine");
  cmd->add_option("--config", a->config, "ds_config.json (default: the built-in tiny config)");
  cmd->add_option("--strata", a->strata_file, "a second JSON file holding the \"strata\" section");
  cmd->add_option("--set", a->sets, "override a config key");
  cmd->add_option("--nproc", a->nproc, "ranks on this node (the world size)")->check(CLI::Range(1, 1 << 20));
  auto* params = cmd->add_option("--params", a->params, "scale the config's model to this many parameters (e.g. 1e9; "
                                                        "1e3 to 1e15)");
  cmd->add_flag("--max", a->max, "the largest model of the config's shape (scaled as --params does) that fits this "
                                 "machine with the best tier placement, beside the physical limit");
  cmd->add_flag("--max-seq", a->max_seq, "the longest sequence (strata.model.seq_len) that fits this machine at the "
                                         "config's micro-batch and tiers, and what stops one token more");
  cmd->add_option("--device", a->device, "where blocks run: cpu, cuda (a GPU; need not be on this machine), auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--machine", a->machine, fmt::format("predict the step time on a machine: \"here\" (this one, "
                                                       "measured in a few seconds) or a GPU machine from nominal "
                                                       "figures: {}", NominalMachineNames()));
  cmd->add_option("--device-memory", a->device_memory, "memory of one GPU for the fit check (e.g. 80G)");
  cmd->add_option("--host-memory", a->host_memory, "plan for another machine: its available host memory (e.g. 120G) "
                                                   "instead of this one's MemAvailable");
  cmd->add_option("--disk-free", a->disk_free, "plan for another machine: the free space of its swap folder "
                                               "(e.g. 60G) instead of this one's");
  cmd->callback([=] {
    a->params_given = params->count() > 0;
    *action = [=] { return RunEstimate(*a); };
  });
}

}  // namespace strata::cli
