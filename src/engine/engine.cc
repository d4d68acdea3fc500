// The Engine's set-up (Init executes the ShardPlan: pools, store, blocks, scratch; their
// creation is in engine_build.cc) and its counters. The state access is in engine_state.cc,
// the step in engine_step.cc, the optimizer in engine_optimizer.cc and update/.
#include "src/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "src/engine/engine_impl.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (!impl_) return;
  if (Status s = impl_->Quiesce(); !s.ok()) LogError("{}", s.message());  // the optimizer uses everything
  if (Status s = impl_->io.dev->Synchronize(); !s.ok()) LogError("{}", s.message());  // its copies read our buffers
  impl_->optimizer.window.DropEarlyStates();
  // Write-backs hold pool buffers: they finish (and give them back) before the pools go.
  if (impl_->state.store) {
    if (Status s = impl_->state.store->FlushWrites(); !s.ok()) LogError("{}", s.message());
    impl_->state.store.reset();
  }
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const RunConfig& config, Communicator* comm, Tracer* tracer,
                                                EngineHooks hooks, ComputeDevice* device) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = *config;
  impl->io.comm = comm;
  if (!device) {
    impl->io.own_device = MakeHostDevice(comm);
    device = impl->io.own_device.get();
  }
  impl->io.dev = device;
  Communicator* dcomm = device->collectives();
  if (dcomm->world_size() != comm->world_size() || dcomm->rank() != comm->rank())
    return InvalidArgument("the device communicator ({} of {}) and the host communicator ({} of {}) disagree",
                           dcomm->rank(), dcomm->world_size(), comm->rank(), comm->world_size());
  impl->io.tracer = tracer;
  device->set_tracer(tracer);
  STRATA_ASSIGN_OR_RETURN(impl->seq, MeshPlace::Make(static_cast<int>(config->sequence_parallel),
                                                     static_cast<int>(config->tensor_parallel), *comm, hooks.blocks_world,
                                                     *device));
  STRATA_RETURN_IF_ERROR(impl->Init(hooks));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

torch::ScalarType Engine::Impl::compute_scalar() const {
  return cfg.compute_dtype == DType::kBF16 ? torch::kBFloat16
         : cfg.compute_dtype == DType::kF16 ? torch::kHalf
                                            : torch::kFloat32;
}

Status Engine::Impl::Init(const EngineHooks& hooks) {
  optimizer.scaler = LossScaler(cfg.loss_scale, cfg.compute_dtype == DType::kF16);
  if (cfg.optimizer == OptimizerKind::kAdam && !cfg.adam_w_mode && cfg.weight_decay > 0)
    return InvalidArgument("optimizer: Adam with L2 weight decay (adam_w_mode false) is not supported; use AdamW");
  model.spec = std::make_unique<model::ModelSpec>(cfg.model);
  model.tie = model.spec->tie();
  plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model), io.comm->world_size(), io.comm->rank(), {io.dev->is_host()});
  STRATA_RETURN_IF_ERROR(plan.CheckFormats(cfg));
  optimizer.thread = std::make_unique<WorkQueue>(Track::kOptimizer, 0, 0, 0, &g_untraced);
  optimizer.mode = MakeUpdateMode(update_mode_parts());
  // Thread policy: on the host, the blocks' compute and the CPU Adam share the rank's cores
  // (LibTorch's pool; overlapping, they take turns). On a GPU the compute thread only issues
  // work, so the Adam takes the rank's cores but one (the issuing thread, I/O completions).
  const int rank_cores = std::max(1, at::get_num_threads());
  optimizer.window.Configure(cfg.seed, cfg.optimizer_threads > 0 ? cfg.optimizer_threads
                                       : io.dev->is_host()          ? rank_cores
                                                                    : std::max(1, rank_cores - 1));
  optimizer.norm_threads = rank_cores;  // what the compute thread's OpenMP calls take
  optimizer.early_sums.assign(plan.blocks.size(), std::nullopt);
  if (cfg.objective == Objective::kDpo) dpo = std::make_unique<DpoObjective>(cfg.dpo);
  auto phase = [&](const std::string& what) {
    if (hooks.on_phase) hooks.on_phase(what);
  };
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto start = Clock::now();
  phase("opening the swap store");
  STRATA_RETURN_IF_ERROR(OpenStore(hooks));
  // The pools alongside the blocks on the host (Note [Pools alongside the blocks]).
  std::future<Status> pooled;
  auto start_pools = [&] {
    if (io.dev->is_host() && !pooled.valid()) pooled = std::async(std::launch::async, [this] { return CreatePools(); });
  };
  if (!io.dev->is_host()) {
    phase("allocating and pinning host buffers");
    STRATA_RETURN_IF_ERROR(CreatePools());
  }
  const auto blocks_start = Clock::now();
  Status built = BuildBlocks(hooks, phase, start_pools);
  start_pools();  // (if BuildBlocks failed before it started them)
  stats.creation.blocks_s = seconds_since(blocks_start);
  Status pinned = pooled.valid() ? pooled.get() : Status();
  STRATA_RETURN_IF_ERROR(built);
  STRATA_RETURN_IF_ERROR(pinned);
  for (StateKind k : {StateKind::kWorking, StateKind::kMaster})
    stats.creation.state_bytes += stats.ledger.At(k, Tier::kCpu) + stats.ledger.At(k, Tier::kNvme);
  for (StateKind k : {StateKind::kAdamM, StateKind::kAdamV})
    stats.creation.zero_bytes += stats.ledger.At(k, Tier::kCpu) + stats.ledger.At(k, Tier::kNvme);
  STRATA_RETURN_IF_ERROR(RegisterPools());
  stats.creation.total_s = seconds_since(start);
  phase("finishing");
  STRATA_RETURN_IF_ERROR(AllocateDeviceBuffers());
  STRATA_RETURN_IF_ERROR(optimizer.mode->Allocate());
  if (model::IsMoe(cfg.model)) experts.Allocate(plan);  // Note [Expert-aware fetching]
  if (!(stats.ledger == plan.ledger))  // a bug: the plan and the engine disagree on a rule
    return Error(StatusCode::kInternal, "the engine allocated {}/{}/{} bytes (device/cpu/nvme), its ShardPlan says "
                 "{}/{}/{}", stats.ledger.Total(Tier::kDevice), stats.ledger.Total(Tier::kCpu),
                 stats.ledger.Total(Tier::kNvme), plan.ledger.Total(Tier::kDevice),
                 plan.ledger.Total(Tier::kCpu), plan.ledger.Total(Tier::kNvme));
  return Status();
}


EngineCounters Engine::counters() const {
  if (Status q = impl_->Quiesce(); !q.ok()) LogError("{}", q.message());
  const auto s = impl_->optimizer.scaler.state();
  return {impl_->optimizer.adam_steps, s.scale, s.clean_steps, s.hysteresis_left, impl_->experts.steps()};
}

void Engine::set_counters(const EngineCounters& c) {
  if (Status q = impl_->Quiesce(); !q.ok()) LogError("{}", q.message());
  impl_->optimizer.adam_steps = c.adam_steps;
  impl_->optimizer.scaler.set_state({c.loss_scale, c.clean_steps, c.hysteresis_left});
  impl_->experts.Restore(c.expert_steps, c.adam_steps);  // (the caller checked the shape: ExpertStepsFit)
}

bool Engine::ExpertStepsFit(const std::vector<std::vector<int64_t>>& steps) const {
  return impl_->experts.Fits(steps);
}

const std::vector<ParamSlot>& Engine::BlockParams(int block) const { return impl_->model.blocks.at(block).slots; }

Status Engine::Finish() {
  STRATA_RETURN_IF_ERROR(impl_->Quiesce());
  STRATA_RETURN_IF_ERROR(impl_->io.dev->Synchronize());
  return impl_->state.store->FlushWrites();
}

const ShardPlan& Engine::plan() const { return impl_->plan; }
int Engine::num_blocks() const { return impl_->num_blocks(); }
const MemoryLedger& Engine::ledger() const { return impl_->stats.ledger; }
bool Engine::UpdateInFlight() const { return !impl_->optimizer.run.done.Ready(); }
uint64_t Engine::swap_bytes_on_disk() const {
  const NvmeTier* nvme = impl_->state.store->nvme();
  return nvme ? nvme->bytes_on_disk() : 0;
}
NvmeTierStats Engine::nvme_stats() const {
  const NvmeTier* nvme = impl_->state.store->nvme();
  return nvme ? nvme->stats() : NvmeTierStats{};
}
uint64_t Engine::prefetch_high_water_bytes() const { return impl_->stats.prefetch_high_water; }
uint64_t Engine::prefetch_budget_bytes() const {
  return std::max<uint64_t>(1, impl_->cfg.prefetch_bucket_size * DTypeSize(impl_->cfg.compute_dtype));
}
const CreationStats& Engine::creation() const { return impl_->stats.creation; }
const SettledConfig& Engine::config() const { return impl_->cfg; }
void Engine::OnStepVisit(std::function<void(size_t done, size_t total)> observer) {
  impl_->on_step_visit = std::move(observer);
}

}  // namespace strata
