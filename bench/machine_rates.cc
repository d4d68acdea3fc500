#include "bench/machine_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/host_copy.h"
#include "bench/io_point.h"
#include "strata/cpu_adam.h"
#include "strata/dtype.h"

#include "src/comm/socket.h"
#include "src/data/data.h"
#include "src/engine/engine.h"
#include "src/settle/settle.h"
#include "strata/communicator.h"
#include "strata/trace.h"

namespace strata::bench {
namespace {

// Seconds per call of `run`: once unmeasured (pages in, caches warm), then the median of calls
// until `budget_s` has passed (at least three, at most nine): what a step sees, not the best case.
template <class F>
double SecondsPerCall(F&& run, double budget_s) {
  run();
  std::vector<double> times;
  double spent = 0;
  while (times.size() < 9 && (times.size() < 3 || spent < budget_s)) {
    const double t0 = NowSeconds();
    run();
    times.push_back(NowSeconds() - t0);
    spent += times.back();
  }
  return Summarize(std::move(times)).median;
}

// The NVMe tier at the config's aio setting: 512 MB passes, write, read, and both at once (as
// the update reads states while writing others back), the better of two.
Status MeasureNvme(const TrainConfig& cfg, MachineRates* r) {
  const std::string dir = cfg.offload_optimizer.device == Tier::kNvme ? cfg.offload_optimizer.nvme_path
                                                                              : cfg.offload_param.nvme_path;
  const uint64_t tensor = 64ull << 20;
  const uint32_t block = cfg.aio.block_size;
  if (block == 0 || tensor % block) return InvalidArgument("aio.block_size {} does not divide 64 MiB", block);
  STRATA_ASSIGN_OR_RETURN(auto pool, MakeBenchPool(StoreBuffersFor(block, cfg.aio.queue_depth, tensor), tensor,
                                                   HostPages::kHuge));
  IoPointSettings s;
  s.dir = dir;
  s.size = 512ull << 20;
  s.block = block;
  s.queue_depth = cfg.aio.queue_depth;
  s.tensor_bytes = tensor;
  STRATA_ASSIGN_OR_RETURN(auto point, IoPoint::Open(s, pool.get()));
  STRATA_RETURN_IF_ERROR(point->Prepare(/*with_fio=*/false));  // the store's rates alone
  for (int round = 0; round < 2; ++round) {
    STRATA_ASSIGN_OR_RETURN(double w, point->StorePass(IoDirection::kWrite));
    STRATA_ASSIGN_OR_RETURN(double rd, point->StorePass(IoDirection::kRead));
    STRATA_ASSIGN_OR_RETURN(double mixed, point->StoreMixedPass());
    r->nvme_write = std::max(r->nvme_write, w * 1e9);
    r->nvme_read = std::max(r->nvme_read, rd * 1e9);
    r->nvme_mixed = std::max(r->nvme_mixed, mixed * 1e9);
  }
  return Status();
}

// CPU Adam: one fused AdamW pass over 16 M parameters with the compute dtype's copy, on the
// optimizer's threads.
double MeasureAdam(const TrainConfig& cfg) {
  const size_t n = size_t{16} << 20;
  std::vector<float> p(n, 0.5f), m(n, 0.f), v(n, 0.f), g(n, 1e-3f);
  std::vector<uint16_t> half(cfg.compute_dtype == DType::kF32 ? 0 : n);
  AdamSpans spans;
  spans.params = p;
  spans.exp_avg = m;
  spans.exp_avg_sq = v;
  spans.grad = g;
  spans.half_out = half;
  AdamHyperParams hp;
  hp.weight_decay = cfg.weight_decay;
  hp.step = 2;
  const AdamOptions threads{.num_threads = cfg.optimizer_threads};
  const double s = SecondsPerCall([&] { AdamStep(hp, spans, threads).IgnoreError(); }, 0.3);
  return static_cast<double>(n) / s;
}

// The block a compute span belongs to ("forward b3", "accumulate g3": 3), or -1.
int BlockOfSpan(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || digits < 2 || name[digits - 2] != ' ' || (name[digits - 1] != 'b' && name[digits - 1] != 'g'))
    return -1;
  return std::stoi(name.substr(digits));
}

// One step's compute split into what a layer costs and what the rest does (the embedding, the
// head, their gradients): the engine itself on two layers of the config's width, everything in
// host memory, one pass of `batch` x `seq` tokens, the update waited for after the backward
// (so that it is not counted); the tracer's compute spans of steps 1-3, by block.
struct ComputeSplit {
  double per_layer = 0, rest = 0;  // seconds per pass
};
StatusOr<ComputeSplit> MeasureComputeSplit(SettledConfig c, int64_t batch, int64_t seq) {
  constexpr int kLayers = 2, kSteps = 3;
  c.model.n_layer = kLayers;
  c.model.seq_len = seq;
  c.micro_batch = batch;
  c.micro_batch_set = batch;
  c.grad_accum = 1;
  c.grad_accum_set = 1;
  c.train_batch_set.reset();
  c.offload_param.device = c.offload_optimizer.device = Tier::kDevice;
  c.host_blocks = 0;
  c.optimizer_overlap = OptimizerOverlap::kNone;
  c.recompute = c.keep_activations ? Recompute::kNever : Recompute::kAlways;
  c.eval_interval = 0;
  c.model_from.clear();
  // One rank's whole pass: a split config's share follows from the FLOPs (StepFlops).
  c.sequence_parallel = c.tensor_parallel = 1;
  auto comm = MakeSingleRankCommunicator();
  STRATA_ASSIGN_OR_RETURN(SettledRun settled, SettleRunConfig(c, {1, 1, false, {true}}));
  STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(c.data, c.model.vocab_size, seq));
  Tracer tracer;
  STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(settled.config, comm.get(), &tracer));
  double since = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    if (step == 1) since = tracer.Now();  // the first step pays one-time costs
    STRATA_RETURN_IF_ERROR(engine->Step(step, *data).status());
  }
  STRATA_RETURN_IF_ERROR(engine->Finish());
  ComputeSplit split;
  for (const TraceEvent& e : tracer.Events()) {
    if (e.track != Track::kCompute || e.start_s < since) continue;
    const int block = BlockOfSpan(e.name);
    (block >= 1 && block <= kLayers ? split.per_layer : split.rest) += e.end_s - e.start_s;
  }
  split.per_layer /= kSteps * kLayers;
  split.rest /= kSteps;
  return split;
}

// One pass of every block as the engine runs it (gathers, forward, recomputation where the
// config recomputes, backward, the head, the gradients added in place), at the shape of a
// block's pass (the micro-batch, or fused the step's; at most 2048 tokens, the model scales
// to the real count): MeasureComputeSplit's layer times n_layer, and the rest.
Status MeasureCompute(const SettledConfig& cfg, MachineRates* r) {
  const model::ModelConfig& mc = cfg.model;
  const int64_t seq = std::min<int64_t>(mc.seq_len, 2048);
  // A block's pass: one micro-batch, or fused all of the step's at once.
  const int64_t rows = cfg.micro_batch * (cfg.layer_major && cfg.fuse_micro_batches ? cfg.grad_accum : 1);
  const int64_t batch = std::clamp<int64_t>(2048 / seq, 1, rows);
  STRATA_ASSIGN_OR_RETURN(ComputeSplit split, MeasureComputeSplit(cfg, batch, seq));
  r->micro_batch_s = split.rest + static_cast<double>(mc.n_layer) * split.per_layer;
  r->probe_tokens = static_cast<double>(batch * seq);
  const double tokens_per_step = static_cast<double>(cfg.micro_batch * mc.seq_len * cfg.grad_accum);
  SettledConfig whole = cfg;  // the probe's pass: whole layers and rows (MeasureComputeSplit)
  whole.sequence_parallel = whole.tensor_parallel = 1;
  r->flops = StepFlops(whole) / tokens_per_step * r->probe_tokens / r->micro_batch_s;
  return Status();
}

// What the cores do per byte through the tier: a memcpy on one thread (the gather copy) and
// xxh3 (the tier's checksums), over 256 MB.
void MeasureHostBytes(MachineRates* r) {
  const size_t bytes = size_t{256} << 20;
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes);
  r->host_copy = MemcpyGbps(b.data(), a.data(), bytes, 1, 3) * 1e9;
  r->checksum = ChecksumGbps(a.data(), bytes) * 1e9;
}

// The blocks' group collectives on the host ride the world's TCP ring (Note [Process mesh]):
// two ranks as threads of this process on loopback, all-gathers of 16 MB a rank, the same
// number of calls on both (a ring call waits for the other). Bytes a rank receives per second.
StatusOr<double> MeasureGroupRing() {
  STRATA_ASSIGN_OR_RETURN(const uint16_t port, comm::FindFreePort());
  constexpr size_t kCount = size_t{4} << 20;  // fp32 elements a rank
  constexpr int kCalls = 5;
  std::vector<Status> errors(2);
  std::vector<double> median(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      LaunchEnv env;
      env.rank = env.local_rank = r;
      env.world_size = 2;
      env.master_port = port;
      auto comm = MakeTcpCommunicator(env, std::chrono::seconds(30));
      if (!comm.ok()) return void(errors[r] = comm.status());
      std::vector<float> mine(kCount, 1.0f), all(2 * kCount);
      std::vector<double> times;
      for (int call = 0; call <= kCalls && errors[r].ok(); ++call) {
        const double t0 = NowSeconds();
        errors[r] = (*comm)->AllGather(mine.data(), all.data(), kCount, DType::kF32);
        if (call > 0) times.push_back(NowSeconds() - t0);  // (the first pays the connection's start)
      }
      if (errors[r].ok()) median[r] = Summarize(std::move(times)).median;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const Status& s : errors) STRATA_RETURN_IF_ERROR(s.WithContext("the group ring's measurement"));
  return static_cast<double>(kCount * 4) / std::max(median[0], median[1]);
}

}  // namespace

StatusOr<MachineRates> MeasureThisMachine(const SettledConfig& cfg) {
  MachineRates r;
  r.name = "this machine";
  r.host_device = true;
  STRATA_RETURN_IF_ERROR(MeasureCompute(cfg, &r));
  r.adam = MeasureAdam(cfg);
  const bool nvme = cfg.offload_param.device == Tier::kNvme || cfg.offload_optimizer.device == Tier::kNvme;
  if (nvme) STRATA_RETURN_IF_ERROR(MeasureNvme(cfg, &r));
  MeasureHostBytes(&r);
  const bool groups = cfg.sequence_parallel * cfg.tensor_parallel > 1;
  if (groups) {
    STRATA_ASSIGN_OR_RETURN(r.group_link, MeasureGroupRing());
  }
  r.source = fmt::format("measured: the engine on two layers of this width {:.3g} TFLOP/s ({}, the gradients' "
                         "accumulation included), CPU Adam {:.3g} G params/s{}, memcpy {:.1f} GB/s, xxh3 {:.1f} GB/s{}",
                         r.flops / 1e12, DTypeName(cfg.compute_dtype), r.adam / 1e9,
                         nvme ? fmt::format(", NVMe read {:.2f} / write {:.2f} / both at once {:.2f} GB/s", r.nvme_read / 1e9,
                                            r.nvme_write / 1e9, r.nvme_mixed / 1e9)
                              : std::string(),
                         r.host_copy / 1e9, r.checksum / 1e9,
                         groups ? fmt::format(", the ranks' TCP ring {:.2f} GB/s received", r.group_link / 1e9) : "");
  return r;
}

}  // namespace strata::bench
