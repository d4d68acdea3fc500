#include "src/estimate/step_time.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "src/estimate/estimator.h"
#include "src/estimate/group_traffic.h"
#include "src/estimate/step_traffic.h"
#include "src/engine/update/mode_facts.h"
#include "src/model/model_config.h"

namespace strata {
namespace {

// Nominal figures, each what the step can use rather than the datasheet's peak:
//   compute   dense bf16 tensor-core peak x 0.5 (a block's training pass at >= 2k tokens
//             reaches 40-60% of peak; smaller micro-batches less)
//   host link PCIe Gen5 x16, 64 GB/s per direction, x 0.8 (pinned copies); GH200's NVLink-C2C,
//             450 GB/s per direction, x 0.8
//   NVMe      one Gen4 x4 drive as the tier's O_DIRECT path sees it: 6 GB/s read, 4 GB/s write
//   CPU Adam  16 cores beside the GPU: the fused AdamW pass moves ~30 B/param through memory,
//             ~75 GB/s of a server socket's share: 2.5 G params/s
//   host accumulation (without device accumulation): ~12 B/element, the same memory: 6 G/s
//   between GPUs (the blocks' group collectives over NCCL): NVLink 4 on SXM boards and GH200
//             systems, 450 GB/s per direction x 0.8; H100 PCIe cards over PCIe Gen5 x 0.87 (an
//             NVLink bridge joins pairs only)
struct Nominal {
  const char* key;
  const char* name;
  double peak_flops;
  double link;
  double peers;
  uint64_t memory;
};
constexpr std::array<Nominal, 4> kNominal{{
    {"h100-pcie", "H100 PCIe", 756e12, 64e9, 64e9 * 0.87, 80'000'000'000},
    {"h100-sxm", "H100 SXM", 989e12, 64e9, 450e9 * 0.8, 80'000'000'000},
    {"h200", "H200 SXM", 989e12, 64e9, 450e9 * 0.8, 141'000'000'000},
    {"gh200", "GH200", 989e12, 450e9, 450e9 * 0.8, 96'000'000'000},
}};

std::string Seconds(double s) { return s >= 10 ? fmt::format("{:.1f} s", s) : fmt::format("{:.3g} s", s); }
std::string Rate(double per_s, const char* unit) {
  return per_s >= 1e12 ? fmt::format("{:.3g} T{}/s", per_s / 1e12, unit) : fmt::format("{:.3g} G{}/s", per_s / 1e9, unit);
}

}  // namespace

double MuonNewtonSchulzFlops(const TrainConfig& cfg) {
  if (cfg.optimizer != OptimizerKind::kMuon) return 0;
  const model::ModelConfig m = model::Canonical(cfg.model);
  const double d = static_cast<double>(m.d_model), hd = static_cast<double>(model::HeadDim(m));
  const double q = static_cast<double>(m.n_head) * hd, kv = static_cast<double>(m.n_kv_head) * hd;
  const double ff = static_cast<double>(m.ffn_hidden);
  auto ns = [](double rows, double cols) {  // 5 x (X X^T, then A A and B X): 4 n^2 m + 2 n^3
    const double n = std::min(rows, cols), w = std::max(rows, cols);
    return 5.0 * (4.0 * n * n * w + 2.0 * n * n * n);
  };
  return static_cast<double>(m.n_layer) * (ns(q, d) + 2 * ns(kv, d) + ns(d, q) + 2 * ns(ff, d) + ns(d, ff));
}

double StepFlops(const SettledConfig& cfg) {
  const model::ModelSpec spec(cfg.model);
  const model::ModelConfig& m = cfg.model;
  // This rank's tokens; with Ulysses its heads' attention over whole rows: the same 1 / S share.
  const double tokens = static_cast<double>(RankMicroBatchTokens(cfg)) * cfg.grad_accum;
  double layers = 0;
  for (int i = 1; i + 1 < spec.num_blocks(); ++i) layers += static_cast<double>(spec.block_parameters(i));
  const double attention = static_cast<double>(m.n_layer * m.n_head * model::HeadDim(m) * m.seq_len);
  // Tensor parallel (Note [Tensor parallel]): the layers' products and attention are 1 / T a
  // rank; the embedding and head run whole on each (a layer's norms, counted as split, are few).
  const double split = 1.0 / static_cast<double>(cfg.tensor_parallel);
  double flops = (spec.train_flops_per_token() - (1.0 - split) * (6.0 * layers + 12.0 * attention)) * tokens;
  if (!cfg.keep_activations) flops += (2.0 * layers + 4.0 * attention) * split * tokens;
  return flops;
}

const char* NominalMachineNames() { return "h100-pcie, h100-sxm, h200, gh200"; }

StatusOr<MachineRates> NominalMachine(std::string_view name) {
  for (const Nominal& n : kNominal) {
    if (name != n.key) continue;
    MachineRates r;
    r.name = n.name;
    // The link's share and the Adam rate as measured on the H200 machine (16 cores): pinned
    // copies 55.3 of PCIe 5.0's 63 GB/s, the fp32 CPU Adam 4.38 G params/s (bench links, bench adam).
    r.source = fmt::format("nominal: {:.0f} TFLOP/s bf16 at half of peak, host link {:.0f} GB/s per direction x 0.87, "
                           "one Gen4 NVMe (6 / 4 GB/s), CPU Adam on 16 cores 4.4 G params/s, {:.0f} GB/s between GPUs",
                           n.peak_flops / 1e12 * 0.5, n.link / 1e9, n.peers / 1e9);
    r.host_device = false;
    r.flops = n.peak_flops * 0.5;
    r.link_in = r.link_out = n.link * 0.87;
    r.nvme_read = 6e9;
    r.nvme_write = 4e9;
    r.adam = 4.4e9;
    r.accumulate = 6e9;
    r.group_link = n.peers;
    r.device_memory = n.memory;
    return r;
  }
  return InvalidArgument("unknown machine \"{}\": use \"here\" (this machine, measured) or one of {}", name,
                         NominalMachineNames());
}

namespace {

// Each resource's seconds per step, alone.
struct StepWork {
  double compute = 0, accumulate = 0, adam = 0;
  double fetch = 0, update_io = 0, nvme = 0, link = 0;  // the drive's reads of working weights, its update traffic
  double fetch_cpu = 0, update_cpu = 0;  // on the host: the cores' copies and hashes beside the compute
  double sums_out = 0;  // device accumulation: the sums' copy to the host, all after their last backward
  double groups = 0;    // the blocks' group collectives, in line with the compute
};

// "1.2 GB received (0.9 GB all-reduced in tensor groups of 2, ...) at 360 GB/s"
std::string GroupWork(const GroupTraffic& g, double received, double rate) {
  std::string parts;
  if (g.tensor > 1)
    parts += fmt::format("{} all-reduced in tensor groups of {}", HumanBytes(static_cast<uint64_t>(g.summed + g.gathered)),
                         g.tensor);
  if (g.sequence > 1)
    parts += fmt::format("{}{} all-to-all in sequence groups of {}", parts.empty() ? "" : ", ",
                         HumanBytes(static_cast<uint64_t>(g.exchanged)), g.sequence);
  return fmt::format("{} received ({}) at {}", HumanBytes(static_cast<uint64_t>(received)), parts, Rate(rate, "B"));
}

StepWork WorkOf(const SettledConfig& cfg, const ShardPlan& plan, const MachineRates& mr, StepTimePrediction* p) {
  StepWork w;
  const double tokens = static_cast<double>(RankMicroBatchTokens(cfg));
  // A measured pass is one rank's whole one; a rank of a split layer or row does its FLOPs' share.
  const bool whole = cfg.tensor_parallel * cfg.sequence_parallel == 1;
  w.compute = mr.micro_batch_s > 0 && whole
                  ? mr.micro_batch_s * tokens / mr.probe_tokens * static_cast<double>(cfg.grad_accum)
                  : p->flops / mr.flops;
  // The groups' collectives block the compute thread on the host; on a GPU they run on the
  // compute stream: in line with the compute either way.
  const GroupTraffic groups = EstimateGroupTraffic(cfg);
  const double group_bytes = groups.Received(mr.host_device, plan.world);
  if (groups.any() && mr.group_link > 0) w.groups = group_bytes / mr.group_link;
  // The host adds each micro-batch's gradients into the accumulators (flattened first), unless
  // the device sums them; on the host device this is on the compute thread's path.
  double grad_elems = 0, optim_elems = 0, working_bytes = 0;
  for (const BlockPlan& b : plan.blocks) {
    grad_elems += static_cast<double>(b.grad.len);
    optim_elems += static_cast<double>(b.optimizer.len);
    working_bytes += static_cast<double>(b.working.len) * plan.dsize;
  }
  // Summed on the device, fp32 sums land in the accumulators themselves (Note [Sums straight
  // into the accumulators]); bf16 ones are rounded into them once.
  const double accum_passes = !plan.device_accum ? static_cast<double>(cfg.grad_accum) : plan.gsize == 4 ? 0.0 : 1.0;
  w.accumulate = grad_elems * accum_passes / mr.accumulate;
  // The update is bound by memory: an optimizer with one state (Lion, Adagrad) moves 20 B per
  // fp32 parameter where Adam's rate was measured at 28 (p, g, m, v read; p, m, v written).
  const OptimizerRule& rule = plan.format.rule();
  const double update_rate = mr.adam * 28.0 / (12.0 + 8.0 * rule.moments());
  w.adam = optim_elems / update_rate;

  const StepTraffic t = EstimateStepTraffic(cfg, plan);
  const double fetched = static_cast<double>(t.read_at_most - t.states);  // the working weights' reads
  w.fetch = fetched / mr.nvme_read;
  // The update reads some sub-groups' states while it writes others back: both at once.
  w.update_io = mr.nvme_mixed > 0 ? static_cast<double>(t.states + t.written) / mr.nvme_mixed
                                  : static_cast<double>(t.states) / mr.nvme_read + static_cast<double>(t.written) / mr.nvme_write;
  if (rule.pre_pass()) {  // LAMB's norm pass or Muon's directions first: the states read once more
    w.adam += optim_elems / (mr.adam * 28.0 / 16.0);
    w.update_io += static_cast<double>(t.states) / mr.nvme_read;
  }
  w.nvme = w.fetch + w.update_io;
  LinkTraffic l;
  if (!mr.host_device) {
    l = EstimateLinkTraffic(cfg, plan);
    w.link = std::max(static_cast<double>(l.in) / mr.link_in, static_cast<double>(l.out) / mr.link_out);
    if (plan.device_accum) w.sums_out = grad_elems * 4 / mr.link_out;
  }
  // On the host the cores that compute also copy each visited block into its gather buffer
  // (twice per pass: forward and backward) and hash what the tier reads and writes.
  auto cpu_per_byte = [&](double rate) { return mr.host_device && rate > 0 ? 1.0 / rate : 0.0; };
  const double hashed = cfg.verify_checksums ? cpu_per_byte(mr.checksum) : 0.0;
  const double gathered = working_bytes * 2.0 * static_cast<double>(BlockPasses(cfg));
  w.fetch_cpu = gathered * cpu_per_byte(mr.host_copy) + fetched * hashed;
  w.update_cpu = w.adam + static_cast<double>(t.states + t.written) * hashed;

  auto& r = p->resources;
  r.push_back({"compute", w.compute, fmt::format("{:.3g} TFLOP at {}", p->flops / 1e12, Rate(mr.flops, "FLOP"))});
  if (w.groups > 0) r.push_back({"group collectives", w.groups, GroupWork(groups, group_bytes, mr.group_link)});
  if (!mr.host_device) r.push_back({"host link", w.link, fmt::format("{} in, {} out", HumanBytes(l.in), HumanBytes(l.out))});
  if (w.sums_out > 0)
    r.push_back({"gradient sums out", w.sums_out, fmt::format("{} summed on the device, copied out after their last backward",
                                                               HumanBytes(static_cast<uint64_t>(grad_elems * 4)))});
  if (w.nvme > 0)
    r.push_back({"NVMe", w.nvme, fmt::format("{} read ({} of them working weights), {} written", HumanBytes(t.read_at_most),
                                             HumanBytes(static_cast<uint64_t>(fetched)), HumanBytes(t.written))});
  if (w.fetch_cpu > 0)
    r.push_back({"host copies, hashes", w.fetch_cpu + w.update_cpu - w.adam,
                 fmt::format("{} into gather buffers at {}, NVMe pieces hashed at {}",
                             HumanBytes(static_cast<uint64_t>(gathered)), Rate(mr.host_copy, "B"), Rate(mr.checksum, "B"))});
  r.push_back({fmt::format("CPU {}", UpdateRuleName(rule.kernel)), w.adam,
               fmt::format("{:.3g} G parameters at {}", optim_elems / 1e9, Rate(update_rate, "param"))});
  if (w.accumulate > 0 && mr.micro_batch_s == 0)  // (a measured pass has it in it)
    r.push_back({"host accumulation", w.accumulate, fmt::format("{:.3g} G elements x {:.0f} at {}", grad_elems / 1e9,
                                                               accum_passes, Rate(mr.accumulate, "elem"))});
  return w;
}

}  // namespace

StepTimePrediction PredictStepTime(const SettledConfig& cfg, const ShardPlan& plan, const MachineRates& mr) {
  StepTimePrediction p;
  p.flops = StepFlops(cfg);
  // Muon: each rank orthogonalises about its share of the matrices, on the compute device.
  if (!plan.blocks.empty()) p.flops += MuonNewtonSchulzFlops(cfg) / plan.blocks.front().layout.world;
  const StepWork w = WorkOf(cfg, plan, mr, &p);
  // Forward and backward: compute (with the host's accumulation where it runs on the compute
  // thread) against the prefetched fetches and the link, each hidden behind the others. The
  // update (CPU Adam against its states' reads and writes) follows the backward; "forward"
  // and "speculative" hide it behind the next forward (a quarter of the pass with recompute,
  // a third without), "delayed" behind the whole next step; the drive serves both. Only the
  // part of the forward that may run before the update ends hides it: micro-batch-major, the
  // first micro-batch's (each of its blocks waits for that block's update, and the others
  // follow it), layer-major every micro-batch's. (The 7 B run on an H200, 16 micro-batches:
  // the whole forward counted, 4.6 s predicted against 6.85 s measured, 1.8 s of it waiting
  // for the update.)
  const double compute_path =
      w.compute + w.groups + w.fetch_cpu + (mr.host_device && mr.micro_batch_s == 0 ? w.accumulate : 0);
  const double fb = std::max({compute_path, w.fetch, w.link});
  const double update = std::max(w.update_cpu, w.update_io);
  const double passes_before = cfg.layer_major ? 1.0 : static_cast<double>(std::max<int64_t>(1, cfg.grad_accum));
  const double forward = fb * (cfg.keep_activations ? 1.0 / 3 : 1.0 / 4) / passes_before;
  // Summed on the device, a block's gradients leave it only once its last backward is done:
  // micro-batch-major all within the last micro-batch's backward, layer-major across the
  // whole backward. What the link needs beyond that delays the update (the 7 B run on an
  // H200: 27 GB after a last backward of ~0.1 s).
  const double sums_out = std::max(0.0, w.sums_out - (fb - forward * passes_before) / passes_before);
  switch (FactsOf(cfg).update_hidden_behind) {
    case UpdateModeFacts::Hidden::kNothing:
      p.step_s = fb + sums_out + update;
      p.overlap = "forward and backward overlap compute with fetches; the step then waits for the update";
      break;
    case UpdateModeFacts::Hidden::kNextStep:
      p.step_s = std::max({fb, update, w.nvme});
      p.overlap = "the update runs beside the whole next step (delayed)";
      break;
    case UpdateModeFacts::Hidden::kNextForward:
      p.step_s = std::max(fb + sums_out + std::max(0.0, update - forward), w.nvme);
      p.overlap = "the update overlaps the next forward; the drive serves fetches and the update together";
      break;
  }
  // Blocks on the host: the update's CPU work runs on the cores the blocks compute on, so
  // it adds to the compute rather than hiding behind it.
  if (mr.host_device && compute_path + w.update_cpu > p.step_s) {
    p.step_s = compute_path + w.update_cpu;
    p.overlap += "; on the host the update's CPU work shares the compute's cores";
  }
  const std::array<std::pair<const char*, double>, 4> candidates{{
      {"compute", compute_path}, {"NVMe", w.nvme}, {"host link", w.link}, {"CPU Adam", w.adam}}};
  p.binding = std::max_element(candidates.begin(), candidates.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  return p;
}

std::string FormatPrediction(const StepTimePrediction& p, const MachineRates& m) {
  std::string out = fmt::format("step time on {} ({}):\n", m.name, m.source);
  for (const ResourceTime& r : p.resources)
    out += fmt::format("  {:<20}{:>10}   {}\n", r.name, Seconds(r.seconds), r.work);
  out += fmt::format("  {:<20}{:>10}   bound by {}; {}\n", "predicted step", Seconds(p.step_s), p.binding, p.overlap);
  return out;
}

}  // namespace strata
