#include "src/estimate/estimator.h"

#include <sys/statvfs.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "strata/flat_group.h"
#include "strata/pinned_pool.h"

namespace strata {
namespace {

int Res(OffloadDevice d) {
  return static_cast<int>(d == OffloadDevice::kNone ? Residence::kDevice
                          : d == OffloadDevice::kCpu ? Residence::kCpu
                                                     : Residence::kNvme);
}

// How the NVMe tier places an extent: capacity rounded to 4 KiB, start aligned to a block
// when the tensor is at least a block (holes are reused by small tensors; ignored here).
uint64_t OnDisk(uint64_t bytes, uint64_t block) {
  const uint64_t cap = (bytes + 4095) / 4096 * 4096;
  return bytes >= block ? (cap + block - 1) / block * block : cap;
}

}  // namespace

uint64_t MemoryEstimate::resident_state() const {
  return ledger.Total(Residence::kDevice) + ledger.Total(Residence::kCpu) + scratch + staging;
}

uint64_t MemoryEstimate::node_host_bytes(int local_ranks) const { return host_peak() * local_ranks; }

MemoryEstimate EstimateMemory(const TrainConfig& cfg, int world, int64_t params_override) {
  MemoryEstimate e;
  e.world = world;
  const model::ModelSpec spec(cfg.model);
  const int n = spec.num_blocks();
  const double scale = params_override > 0 ? static_cast<double>(params_override) / spec.num_parameters() : 1.0;
  const uint64_t dsize = DTypeSize(cfg.compute_dtype);
  const int stage = cfg.zero_stage;
  const int pres = Res(cfg.offload_param.device), ores = Res(cfg.offload_optimizer.device);
  const uint64_t block = cfg.aio.block_size;
  auto add = [&](StateKind k, int r, uint64_t bytes) { e.ledger.bytes[static_cast<int>(k)][r] += bytes; };
  int64_t max_padded = 0, max_shard = 0, max_working = 0, max_sub = 0, tied_padded = 0;
  for (int b = 0; b < n; ++b) {
    const int64_t numel = static_cast<int64_t>(std::llround(spec.block_parameters(b) * scale));
    e.parameters += numel;
    const ShardLayout l = MakeShardLayout(numel, world, 0);  // every rank's shard has the same size
    const int64_t working = stage == 3 ? l.shard : l.padded;
    add(StateKind::kWorking, pres, working * dsize);
    if (pres == static_cast<int>(Residence::kNvme)) e.nvme_on_disk += OnDisk(working * dsize, block);
    const int64_t opt = stage >= 1 ? l.shard : l.padded;
    for (auto [lo, hi] : SplitRange(opt, cfg.sub_group_size)) {
      const uint64_t bytes = (hi - lo) * 4;
      for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) add(k, ores, bytes);
      if (ores == static_cast<int>(Residence::kNvme)) e.nvme_on_disk += 3 * OnDisk(bytes, block);
      max_sub = std::max(max_sub, hi - lo);
    }
    add(StateKind::kGradAccum, static_cast<int>(Residence::kCpu), (stage >= 2 ? l.shard : l.padded) * 4);
    max_padded = std::max(max_padded, l.padded);
    max_shard = std::max(max_shard, l.shard);
    max_working = std::max<int64_t>(max_working, working * dsize);
    if (b == 0) tied_padded = l.padded;
  }
  const bool tied = spec.tie().has_value();
  // Engine scratch (engine.cc Init): flat_grad [max padded], reduced [max shard], and for a
  // tied model pending_tied [V, C], all fp32.
  e.scratch = (max_padded + max_shard) * 4 +
              (tied ? static_cast<uint64_t>(std::llround(cfg.model.vocab_size * cfg.model.d_model * scale)) * 4 : 0);
  if (cfg.offload_param.device == OffloadDevice::kNvme || cfg.offload_optimizer.device == OffloadDevice::kNvme)
    e.staging = std::min<int64_t>(cfg.aio.queue_depth, 8) * cfg.aio.block_size;  // NvmeTier staging
  add(StateKind::kGatherBuffers, static_cast<int>(Residence::kDevice), (max_padded + (tied ? tied_padded : 0)) * dsize);
  if (cfg.offload_param.device == OffloadDevice::kNvme)
    add(StateKind::kPinnedBuffers, static_cast<int>(Residence::kCpu),
        PinnedPool::RegionBytes(std::max<int64_t>(3, cfg.offload_param.buffer_count), max_working));
  if (cfg.offload_optimizer.device == OffloadDevice::kNvme)
    add(StateKind::kPinnedBuffers, static_cast<int>(Residence::kCpu), PinnedPool::RegionBytes(12, max_sub * 4));
  // Activations (approximate): each block's saved input, one layer's forward + backward
  // working set (~32 x [B, T, C]: measured 29 on the tiny model; flash attention keeps no
  // [T, T] scores) and the head's fp32 logits, their softmax and gradient (3 x [B, T, V]).
  const auto& m = cfg.model;
  const double btc = static_cast<double>(cfg.micro_batch) * m.seq_len * m.d_model;
  const double scale_c = params_override > 0 ? std::sqrt(scale) : 1.0;  // width grows as sqrt(params)
  e.activations = static_cast<uint64_t>(btc * scale_c * dsize * (n + 32) +
                                        3.0 * cfg.micro_batch * m.seq_len * m.vocab_size * 4);
  e.transients = max_padded * (dsize + 4);
  e.runtime = kRuntimeBytes;
  // Page-locked: the pinned pools, and the cpu tier's states when it is pinned (mlock).
  if (cfg.offload_param.pin_memory || cfg.offload_optimizer.pin_memory)
    e.pinned = e.ledger.bytes[static_cast<int>(StateKind::kPinnedBuffers)][static_cast<int>(Residence::kCpu)];
  if (cfg.offload_optimizer.pin_memory)
    for (StateKind k : {StateKind::kWorking, StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
      e.pinned += e.ledger.bytes[static_cast<int>(k)][static_cast<int>(Residence::kCpu)];
  return e;
}

uint64_t ProcKilobyteField(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

MachineCapacity ProbeMachine(const TrainConfig& cfg) {
  MachineCapacity m;
  m.host_available = ProcKilobyteField("/proc/meminfo", "MemAvailable:");
  const bool nvme = cfg.offload_param.device == OffloadDevice::kNvme || cfg.offload_optimizer.device == OffloadDevice::kNvme;
  if (nvme) {
    m.nvme_dir = cfg.offload_optimizer.device == OffloadDevice::kNvme ? cfg.offload_optimizer.nvme_path
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

Status CheckFits(const MemoryEstimate& e, const MachineCapacity& m, int local_ranks) {
  std::string why;
  const uint64_t host = e.node_host_bytes(local_ranks);
  if (m.host_available > 0 && host > m.host_available)
    why += fmt::format(
        "\n  host memory: {} needed ({} rank(s) x {} = device {} + cpu {} + scratch and staging {} + activations ~{} "
        "+ gradient transients {} + runtime {}), {} available",
        HumanBytes(host), local_ranks, HumanBytes(host / local_ranks), HumanBytes(e.ledger.Total(Residence::kDevice)),
        HumanBytes(e.ledger.Total(Residence::kCpu)), HumanBytes(e.scratch + e.staging), HumanBytes(e.activations),
        HumanBytes(e.transients), HumanBytes(e.runtime), HumanBytes(m.host_available));
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
                                 "fp32 gradient accumulator", "gather buffers", "pinned I/O buffers"};
  std::string out = fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "per rank", "device", "cpu", "nvme");
  for (int k = 0; k < kNumStateKinds; ++k)
    out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", kNames[k], HumanBytes(e.ledger.bytes[k][0]),
                       HumanBytes(e.ledger.bytes[k][1]), HumanBytes(e.ledger.bytes[k][2]));
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "fp32 gradient scratch", HumanBytes(e.scratch), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "NVMe staging", "-", HumanBytes(e.staging), "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "activations (approx.)", HumanBytes(e.activations), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "gradient transients", HumanBytes(e.transients), "-", "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "runtime (measured const.)", "-", HumanBytes(e.runtime), "-");
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "total",
                     HumanBytes(e.ledger.Total(Residence::kDevice) + e.scratch + e.activations + e.transients),
                     HumanBytes(e.ledger.Total(Residence::kCpu) + e.staging + e.runtime), HumanBytes(e.nvme_on_disk));
  out += fmt::format("{:<28}{:>14}{:>14}{:>14}\n", "  of which page-locked", "-", HumanBytes(e.pinned), "-");
  return out;
}

}  // namespace strata
