#include "src/estimate/estimator.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace strata {

uint64_t MemoryEstimate::resident_state() const {
  return ledger.Total(Tier::kDevice) + ledger.Total(Tier::kCpu) + scratch + staging + grad_staging;
}

uint64_t MemoryEstimate::device_peak() const {
  return ledger.Total(Tier::kDevice) + scratch + activations + transients;
}

uint64_t MemoryEstimate::host_peak() const {
  const uint64_t host = ledger.Total(Tier::kCpu) + staging + grad_staging + runtime + host_inputs;
  return std::max(host_device ? host + device_peak() : host, host + creation);
}

uint64_t MemoryEstimate::node_host_bytes(int local_ranks) const { return host_peak() * local_ranks; }

MemoryEstimate EstimateMemory(const SettledConfig& cfg, int world, int64_t params_override, DeviceTraits device) {
  MemoryEstimate e;
  e.world = world;
  e.host_device = device.host;
  const ModelShape shape = ModelShape::Of(cfg.model, params_override);
  // Every rank's shard has the same size.
  const ShardPlan plan = ShardPlan::Make(cfg, shape, world, /*rank=*/0, device);
  for (int64_t n : shape.block_numels) e.parameters += n;
  e.ledger = plan.ledger;
  e.format = plan.format;
  e.scratch = plan.scratch_bytes;
  e.staging = plan.staging_bytes;
  e.grad_staging = plan.grad_staging_bytes;
  e.nvme_on_disk = plan.nvme_on_disk;
  // Activations (approximate): each block's saved input, one layer's forward + backward
  // working set (~32 x [B, T, C]: measured 29 on the tiny model; flash attention keeps no
  // [T, T] scores) and the head's fp32 logits, their softmax and gradient (3 x [B, T, V]; with
  // the tiled loss, 3 x [tile, V]: Note [Tiled loss]).
  const auto& m = cfg.model;
  const double scale = params_override > 0 ? static_cast<double>(e.parameters) / model::ModelSpec(m).num_parameters() : 1;
  const double btc = static_cast<double>(RankMicroBatchTokens(cfg)) * m.d_model;  // this rank's positions
  const double scale_c = params_override > 0 ? std::sqrt(scale) : 1.0;  // width grows as sqrt(params)
  const int n = static_cast<int>(plan.blocks.size());
  // Kept activations (no recompute): every layer's saved tensors live until its backward;
  // GPT-2 ~16 x [B, T, C] each (measured 13-15, 8 x 256 wide, bf16 and fp32; SDPA keeps no
  // T x T matrix). LLaMA keeps more (SwiGLU's three [B, T, F] products, the RMSNorms' fp32
  // copies, the rotated q and k): 25 + 4.25 F/C, fitted to host peaks measured at 8 x 256
  // wide, bf16, F = 2C, 2.75C, 4C (16 + 17.3, 19.6, 25.8) and matching a 4.9 B run (43 x
  // 3072 wide, F = 2.67C: 2.85 GB above the estimate of 16 x [B, T, C]).
  // Tensor parallel (Note [Tensor parallel]): the MLP's intermediates ([B, T, F] terms) and the
  // heads' q, k, v and output (~4 x [B, T, C]) are 1 / T a rank; the residual stream, the norms
  // and the sublayers' inputs stay whole.
  const double split = 1.0 / static_cast<double>(cfg.tensor_parallel), heads_saved = 4.0 * (1.0 - split);
  const double f_over_c = static_cast<double>(model::FfnHidden(m)) / m.d_model;
  const double saved = (m.arch == model::Arch::kLlama ? 25.0 + 4.25 * f_over_c * split : 16.0) - heads_saved;
  const double per_layer = cfg.keep_activations ? saved * m.n_layer : 0.0;
  // Layer-major, every micro-batch's block inputs (and kept graphs) live until its backward;
  // the head and one layer's working set serve one micro-batch at a time.
  // Fused, one layer's working set serves them all at once.
  const double held = cfg.layer_major ? static_cast<double>(cfg.grad_accum) : 1.0;
  // Of the working set, the MLP's intermediates are ~3 x [B, T, F]; tiled (Note [Tiled MLP]),
  // one tile's. (2 layers 512 wide, F = 3C, 32 K tokens, recompute: host peak 1.50 -> 1.22 GB
  // with tiles of 1024, 8.4 x [B, T, C] less.)
  const double tokens = static_cast<double>(RankMicroBatchTokens(cfg));
  const double tiled = static_cast<double>(MlpTileTokens(cfg)) / tokens;
  const double mlp_saved = 3.0 * f_over_c * (1.0 - tiled) + 3.0 * f_over_c * (1.0 - split) * tiled;  // tiles, then T
  // (A dense width far beyond the measured shapes, F >> 8C, would make the fit negative.)
  const double working =
      std::max(0.0, 32 - mlp_saved - heads_saved) * (cfg.layer_major && cfg.fuse_micro_batches ? held : 1.0);
  e.boundary_activations = static_cast<uint64_t>(btc * scale_c * plan.dsize * n * held);
  // Tiled, the head's logits are each rank's share of the vocabulary (Note [Tensor parallel]).
  const double vocab = static_cast<double>(m.vocab_size) * (cfg.loss_chunk > 0 ? split : 1.0);
  e.activations = static_cast<uint64_t>(btc * scale_c * plan.dsize * (held * (n + per_layer) + working) +
                                        3.0 * static_cast<double>(LossTileTokens(cfg)) * vocab * 4);
  // Note [Block inputs in the tiers] (counted for every block, as boundary_activations are).
  const uint64_t moved = e.boundary_activations;
  const BlockInputsAt inputs_at = cfg.keep_activations ? BlockInputsAt::kDevice : cfg.block_inputs_at;
  if (inputs_at == BlockInputsAt::kHost && !device.host) {  // copied out after each forward
    e.host_inputs = moved;
    e.activations -= moved;
  } else if (inputs_at == BlockInputsAt::kNvme) {  // in the swap file, one visit's read back at a time
    const uint64_t one = static_cast<uint64_t>(btc * scale_c * plan.dsize);  // one block's, one pass
    e.activations -= moved - 2 * one;
    e.nvme_on_disk += moved + static_cast<uint64_t>(n) * 4096;  // each its own 4 KiB-aligned extent
  }
  e.transients = plan.max_grad_flat * (plan.dsize + 4);  // a block's weight gradients, and in fp32 (LoRA: adapters')
  e.runtime = kRuntimeBytes;
  e.creation = (plan.creation_draws + 1) * plan.staging_numel() * (4 + (cfg.compute_dtype == DType::kF32 ? 0 : plan.dsize));
  // Page-locked: the pinned pools, and the cpu tier's working weights when it is pinned
  // (mlock; the optimizer states there are pageable: no device copies them).
  for (const PoolPlan* pool : {&plan.param_pool, &plan.optim_pool, &plan.park_pool})
    if (pool->pin) e.pinned += pool->region_bytes();
  if (!device.host) e.pinned += e.grad_staging;  // cudaHostRegister'd on a GPU
  // Off the host with device accumulation, fp32 accumulators take the sums straight from the
  // device (Note [Sums straight into the accumulators]).
  if (!device.host && plan.device_accum && plan.gsize == 4) e.pinned += plan.ledger.At(StateKind::kGradAccum, Tier::kCpu);
  if (cfg.offload_optimizer.pin_memory) e.pinned += plan.ledger.At(StateKind::kWorking, Tier::kCpu);
  return e;
}

uint64_t ProcKilobyteField(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

MachineCapacity ProbeMachine(const TrainConfig& cfg, uint64_t device_memory) {
  MachineCapacity m;
  m.device_memory = cfg.device_memory ? cfg.device_memory : device_memory;
  m.host_available = ProcKilobyteField("/proc/meminfo", "MemAvailable:");
  const bool nvme = HasSwapFolder(cfg);
  if (nvme) {
    m.nvme_dir = cfg.offload_optimizer.device == Tier::kNvme ? cfg.offload_optimizer.nvme_path
                                                                       : cfg.offload_param.nvme_path;
    // The folder may not exist yet: ask its nearest existing ancestor.
    std::filesystem::path p = std::filesystem::absolute(m.nvme_dir);
    std::error_code ec;
    while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.root_path()) p = p.parent_path();
    struct statvfs st {};
    if (::statvfs(p.c_str(), &st) == 0) m.nvme_free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  return m;
}

std::string HumanBytes(uint64_t b) {
  const double x = static_cast<double>(b);
  if (x >= 1e9) return fmt::format("{:.2f} GB", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f} MB", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f} kB", x / 1e3);
  return fmt::format("{} B", b);
}

std::string MeasuredVsEstimated(uint64_t measured, uint64_t estimated) {
  if (measured == 0 && estimated != 0) return fmt::format("0 B (estimated {}, none measured)", HumanBytes(estimated));
  const double error = measured ? 100.0 * (static_cast<double>(estimated) - measured) / measured : 0.0;
  return fmt::format("{} (estimated {}, {:+.1f}%)", HumanBytes(measured), HumanBytes(estimated), error);
}

Status CheckFits(const MemoryEstimate& e, const MachineCapacity& m, int local_ranks) {
  std::string why;
  const uint64_t host = e.node_host_bytes(local_ranks);
  if (m.host_available > 0 && host > m.host_available)
    why += fmt::format(
        "\n  host memory: {} needed ({} rank(s) x {} = {}cpu {} + staging {} + runtime {}), {} available",
        HumanBytes(host), local_ranks, HumanBytes(host / local_ranks),
        e.host_device ? fmt::format("device {} + scratch {} + activations ~{} + gradient transients {} + ",
                                    HumanBytes(e.ledger.Total(Tier::kDevice)), HumanBytes(e.scratch),
                                    HumanBytes(e.activations), HumanBytes(e.transients))
                      : std::string(),
        HumanBytes(e.ledger.Total(Tier::kCpu)), HumanBytes(e.staging + e.grad_staging), HumanBytes(e.runtime),
        HumanBytes(m.host_available));
  // One rank per GPU: each rank's device tier against one GPU's memory.
  if (!e.host_device && m.device_memory > 0 && e.device_peak() > m.device_memory)
    why += fmt::format("\n  device memory: {} needed per rank (resident working weights, gather buffers {}, scratch {}, "
                       "activations ~{}, gradient transients {}), {} on the GPU (lower strata.resident_blocks or "
                       "offload the parameters)",
                       HumanBytes(e.device_peak()), HumanBytes(e.ledger.Of(StateKind::kGatherBuffers)),
                       HumanBytes(e.scratch), HumanBytes(e.activations), HumanBytes(e.transients),
                       HumanBytes(m.device_memory));
  const uint64_t disk = e.node_nvme_bytes(local_ranks);
  if (m.nvme_free > 0 && disk > m.nvme_free)
    why += fmt::format("\n  NVMe: {} needed in '{}' ({} rank(s) x {}), {} free", HumanBytes(disk), m.nvme_dir,
                       local_ranks, HumanBytes(e.nvme_on_disk), HumanBytes(m.nvme_free));
  if (why.empty()) return Status();
  return Error(StatusCode::kResourceExhausted,
               "this config does not fit this machine ({:.3g} B parameters, {} rank(s)):{}\n  (see strata estimate; "
               "offload more to nvme, add ranks, or shrink the micro-batch)",
               e.parameters / 1e9, e.world, why);
}

std::string FormatEstimate(const MemoryEstimate& e) {
  static const char* kNames[] = {"bf16/fp32 working weights", "fp32 master weights", "Adam m", "Adam v",
                                 "gradient accumulator", "gather buffers", "pinned I/O buffers",
                                 "speculation backups", "Muon updates"};
  std::string out = fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "per rank", "device", "cpu", "nvme");
  for (int k = 0; k < kNumStateKinds; ++k) {
    if ((k == static_cast<int>(StateKind::kSpeculationBackup) || k == static_cast<int>(StateKind::kMuonUpdates)) &&
        e.ledger.Of(static_cast<StateKind>(k)) == 0)
      continue;  // a row only for the mode or optimizer that has them
    // The master's and the moments' rows are named by the format and its optimizer.
    const int state = k - static_cast<int>(StateKind::kMaster);
    const bool optimizer_state = state >= 0 && state < 3;
    if (optimizer_state && state > 0 && !e.format.Stores(kStateRoles[state])) continue;  // a slot its optimizer keeps not
    const char* name = optimizer_state ? e.format.RowName(kStateRoles[state]) : kNames[k];
    out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", name, HumanBytes(e.ledger.bytes[k][0]),
                       HumanBytes(e.ledger.bytes[k][1]), HumanBytes(e.ledger.bytes[k][2]));
  }
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "gradient scratch", HumanBytes(e.scratch), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "NVMe staging", "-", HumanBytes(e.staging), "-");
  if (!e.host_device)
    out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "gradient copies (pinned)", "-", HumanBytes(e.grad_staging), "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "activations (approx.)", HumanBytes(e.activations), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "gradient transients", HumanBytes(e.transients), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "runtime (measured const.)", "-", HumanBytes(e.runtime), "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "creation staging (start-up)", "-", HumanBytes(e.creation), "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "total", HumanBytes(e.device_peak()),
                     HumanBytes(e.ledger.Total(Tier::kCpu) + e.staging + e.grad_staging + e.runtime),
                     HumanBytes(e.nvme_on_disk));
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "  of which page-locked", "-", HumanBytes(e.pinned), "-");
  return out;
}

}  // namespace strata
