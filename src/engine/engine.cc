// The Engine's set-up (Init executes the ShardPlan: pools, store, blocks, scratch; their
// creation is in engine_build.cc) and its state access (checkpoints, export, counters). The
// step is in engine_step.cc, the optimizer in engine_optimizer.cc.
#include "src/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "src/engine/engine_impl.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {

HostArrays::~HostArrays() {
  for (auto [p, bytes] : allocs_) FreeHostMemory(p, bytes);
}

StatusOr<std::byte*> HostArrays::Allocate(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(std::byte * p, AllocateHostMemory(bytes));
  allocs_.push_back({p, bytes});
  return p;
}

StatusOr<std::byte*> HostArrays::Reserve(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(std::byte * p, ReserveHostMemory(bytes));
  allocs_.push_back({p, bytes});
  return p;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (!impl_) return;
  if (Status s = impl_->Quiesce(); !s.ok()) LogError("{}", s.message());  // the optimizer uses everything
  if (Status s = impl_->dev->Synchronize(); !s.ok()) LogError("{}", s.message());  // its copies read our buffers
  impl_->DropEarlyStates();
  // Write-backs hold pool buffers: they finish (and give them back) before the pools go.
  if (impl_->store) {
    if (Status s = impl_->store->FlushWrites(); !s.ok()) LogError("{}", s.message());
    impl_->store.reset();
  }
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const RunConfig& config, Communicator* comm, Tracer* tracer,
                                                EngineHooks hooks, ComputeDevice* device) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = *config;
  impl->comm = comm;
  if (!device) {
    impl->own_device = MakeHostDevice(comm);
    device = impl->own_device.get();
  }
  impl->dev = device;
  Communicator* dcomm = device->collectives();
  if (dcomm->world_size() != comm->world_size() || dcomm->rank() != comm->rank())
    return InvalidArgument("the device communicator ({} of {}) and the host communicator ({} of {}) disagree",
                           dcomm->rank(), dcomm->world_size(), comm->rank(), comm->world_size());
  impl->tracer = tracer;
  device->set_tracer(tracer);
  STRATA_RETURN_IF_ERROR(impl->Init(hooks));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

torch::ScalarType Engine::Impl::compute_scalar() const {
  return cfg.compute_dtype == DType::kBF16 ? torch::kBFloat16
         : cfg.compute_dtype == DType::kF16 ? torch::kHalf
                                            : torch::kFloat32;
}

Status Engine::Impl::Init(const EngineHooks& hooks) {
  scaler = LossScaler(cfg.loss_scale, cfg.compute_dtype == DType::kF16);
  if (!cfg.adam_w_mode && cfg.weight_decay > 0)
    return InvalidArgument("optimizer: Adam with L2 weight decay (adam_w_mode false) is not supported; use AdamW");
  model.spec = std::make_unique<model::ModelSpec>(cfg.model);
  model.tie = model.spec->tie();
  plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model), comm->world_size(), comm->rank(), {dev->is_host()});
  STRATA_RETURN_IF_ERROR(plan.CheckFormats(cfg));
  optimizer.thread = std::make_unique<WorkQueue>(Track::kOptimizer, 0, 0, 0, &g_untraced);
  // Thread policy: on the host, the blocks' compute and the CPU Adam share the rank's cores
  // (LibTorch's pool; overlapping, they take turns). On a GPU the compute thread only issues
  // work, so the Adam takes the rank's cores but one (the issuing thread, I/O completions).
  const int rank_cores = std::max(1, at::get_num_threads());
  optimizer.threads = cfg.optimizer_threads > 0 ? cfg.optimizer_threads
                      : dev->is_host()          ? rank_cores
                                                : std::max(1, rank_cores - 1);
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
    if (dev->is_host() && !pooled.valid()) pooled = std::async(std::launch::async, [this] { return CreatePools(); });
  };
  if (!dev->is_host()) {
    phase("allocating and pinning host buffers");
    STRATA_RETURN_IF_ERROR(CreatePools());
  }
  const auto blocks_start = Clock::now();
  Status built = BuildBlocks(hooks, phase, start_pools);
  start_pools();  // (if BuildBlocks failed before it started them)
  creation.blocks_s = seconds_since(blocks_start);
  Status pinned = pooled.valid() ? pooled.get() : Status();
  STRATA_RETURN_IF_ERROR(built);
  STRATA_RETURN_IF_ERROR(pinned);
  for (StateKind k : {StateKind::kWorking, StateKind::kMaster})
    creation.state_bytes += ledger.At(k, Residence::kCpu) + ledger.At(k, Residence::kNvme);
  for (StateKind k : {StateKind::kAdamM, StateKind::kAdamV})
    creation.zero_bytes += ledger.At(k, Residence::kCpu) + ledger.At(k, Residence::kNvme);
  STRATA_RETURN_IF_ERROR(RegisterPools());
  creation.total_s = seconds_since(start);
  phase("finishing");
  STRATA_RETURN_IF_ERROR(AllocateDeviceBuffers());
  STRATA_RETURN_IF_ERROR(AllocateSpeculation());
  if (!(ledger == plan.ledger))  // a bug: the plan and the engine disagree on a rule
    return Error(StatusCode::kInternal, "the engine allocated {}/{}/{} bytes (device/cpu/nvme), its ShardPlan says "
                 "{}/{}/{}", ledger.Total(Residence::kDevice), ledger.Total(Residence::kCpu),
                 ledger.Total(Residence::kNvme), plan.ledger.Total(Residence::kDevice),
                 plan.ledger.Total(Residence::kCpu), plan.ledger.Total(Residence::kNvme));
  return Status();
}


const std::byte* Engine::Impl::HostWorking(int b) {
  const TensorHandle h = model.blocks[b].working;
  return h.valid() && store->home(h) == Tier::kCpu ? store->CpuMemory(h).data() : nullptr;
}

StatusOr<NamedTensors> Engine::MasterParameters(int block) {
  Impl& m = *impl_;
  STRATA_RETURN_IF_ERROR(m.Quiesce());
  STRATA_CHECK(block >= 0 && block < m.num_blocks()) << "block " << block;
  const BlockRuntime& br = m.model.blocks[block];
  const ShardLayout& layout = m.plan.blocks[block].layout;
  torch::Tensor full = torch::zeros({layout.padded}, torch::kFloat32);
  std::vector<std::byte> working;  // where the format keeps the master (or its high halves)
  if (m.plan.format.MasterFromWorking()) {
    STRATA_ASSIGN_OR_RETURN(working, m.ReadWorking(block));
  }
  for (const SubGroup& sg : br.subs) {
    torch::Tensor part = full.narrow(0, sg.range.begin, sg.range.len);
    auto dst = std::span<std::byte>(static_cast<std::byte*>(part.data_ptr()), sg.range.len * 4);
    STRATA_RETURN_IF_ERROR(m.ReadMaster(block, sg, working, dst));
  }
  if (m.plan.optim_sharded && m.comm->world_size() > 1) {
    torch::Tensor shard = full.narrow(0, layout.begin(), layout.shard).clone();
    STRATA_RETURN_IF_ERROR(m.comm->AllGather(shard.data_ptr(), full.data_ptr(), layout.shard, DType::kF32));
  }
  NamedTensors out;
  for (const ParamSlot& s : br.slots) out.push_back({s.name, full.narrow(0, s.offset, s.numel).view(s.shape).clone()});
  return out;
}

Status Engine::VisitState(const std::function<Status(const TensorKey& key, std::span<const std::byte> bytes)>& visit) {
  Impl& m = *impl_;
  STRATA_RETURN_IF_ERROR(m.Quiesce());  // a checkpoint taken mid-overlap waits for the step to finish
  const StateFormat& format = m.plan.format;
  std::vector<std::byte> buf;
  auto one = [&](const TensorKey& key, TensorHandle h) -> Status {
    buf.resize(m.store->bytes(h));
    STRATA_RETURN_IF_ERROR(m.store->Read(h, buf).Wait());
    if (!format.Converts(key.role)) return visit(key, buf);
    return visit(key, format.Visit(key.role, buf, m.plan.SubGroupLen(key)));  // as checkpoints hold it
  };
  std::vector<std::byte> working, master;  // what holds the master (all or its high halves), and the master
  for (int b = 0; b < m.num_blocks(); ++b) {
    const BlockRuntime& br = m.model.blocks[b];
    if (format.MasterFromWorking()) {
      STRATA_ASSIGN_OR_RETURN(working, m.ReadWorking(b));
    }
    if (m.plan.resident[b]) {  // on the device: copied out
      const torch::Tensor& t = m.bufs.resident[b];
      buf.resize(t.nbytes());
      STRATA_RETURN_IF_ERROR(m.dev->CopyOut(buf.data(), t, {m.bufs.resident_ready[b]}).Wait());
      STRATA_RETURN_IF_ERROR(visit({b, TensorRole::kWorking, 0}, buf));
    } else if (format.MasterFromWorking()) {  // read once for both
      STRATA_RETURN_IF_ERROR(visit({b, TensorRole::kWorking, 0}, working));
    } else {
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kWorking, 0}, br.working));
    }
    if (br.adapter.valid()) STRATA_RETURN_IF_ERROR(one({b, TensorRole::kAdapter, 0}, br.adapter));
    for (const SubGroup& sg : br.subs) {
      if (format.MasterFromWorking()) {  // visited as the fp32 master it stands for
        master.resize(sg.range.len * 4);
        STRATA_RETURN_IF_ERROR(m.ReadMaster(b, sg, working, master));
        STRATA_RETURN_IF_ERROR(visit({b, TensorRole::kMaster, sg.range.begin}, master));
      } else {
        STRATA_RETURN_IF_ERROR(one({b, TensorRole::kMaster, sg.range.begin}, sg.master));
      }
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kAdamM, sg.range.begin}, sg.m));
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kAdamV, sg.range.begin}, sg.v));
    }
  }
  return Status();
}

Status Engine::RestoreState(const TensorKey& key, std::span<const std::byte> bytes) {
  Impl& m = *impl_;
  // Masters kept in a block's working weights are patched into them in memory, and the block's
  // weights written once, when the restore moves to another block (RestoreMasterFromWorking).
  // While that is under way the engine is quiesced already (by the restore's first call; a
  // Step or Quiesce writes them).
  if (m.restoring.block < 0) STRATA_RETURN_IF_ERROR(m.Quiesce());
  if (key.role == TensorRole::kWorking && key.block >= 0 && key.block < m.num_blocks() && m.plan.resident[key.block]) {
    const torch::Tensor& t = m.bufs.resident[key.block];
    if (bytes.size() != t.nbytes())
      return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(),
                   t.nbytes(), bytes.size());
    STRATA_RETURN_IF_ERROR(m.dev->Synchronize());  // nothing still reads the old weights
    m.bufs.resident_ready[key.block] = m.dev->CopyIn(t, bytes.data(), {});
    return m.bufs.resident_ready[key.block].Wait();  // `bytes` is the caller's
  }
  std::optional<TensorHandle> h;
  const SubGroup* sub = nullptr;  // an optimizer state's sub-group
  if (key.block >= 0 && key.block < m.num_blocks()) {
    const BlockRuntime& br = m.model.blocks[key.block];
    if (key.role == TensorRole::kWorking) h = br.working;
    if (key.role == TensorRole::kAdapter && br.adapter.valid()) h = br.adapter;
    for (const SubGroup& sg : br.subs)
      if (key.role != TensorRole::kWorking && key.role != TensorRole::kAdapter && sg.range.begin == key.offset) {
        h = key.role == TensorRole::kMaster ? sg.master : key.role == TensorRole::kAdamM ? sg.m : sg.v;
        sub = &sg;
      }
  }
  if (!h) return Error(StatusCode::kNotFound, "no tensor '{}' in this run's state", key.Name());
  const StateFormat& format = m.plan.format;
  if (key.role == TensorRole::kWorking && format.MasterFromWorking() && bytes.size() == m.store->bytes(*h)) {
    if (m.restoring.block != key.block) STRATA_RETURN_IF_ERROR(m.FlushRestoringWorking());
    m.restoring.block = key.block;  // its masters, before or after, are patched into these
    m.restoring.bytes.assign(bytes.begin(), bytes.end());
    return Status();
  }
  if (key.role == TensorRole::kMaster && format.MasterFromWorking()) return m.RestoreMasterFromWorking(key, *sub, bytes);
  if (format.Converts(key.role)) {  // as checkpoints hold it, to what the store keeps (the blob VisitState read)
    if (bytes.size() != static_cast<size_t>(sub->range.len) * format.VisitedBytes(key.role))
      return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} fp32 values, the checkpoint holds {} bytes",
                   key.Name(), sub->range.len, bytes.size());
    return m.store->Write(*h, format.Restore(key.role, bytes, sub->range.len)).Wait();
  }
  if (bytes.size() != m.store->bytes(*h))
    return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(),
                 m.store->bytes(*h), bytes.size());
  return m.store->Write(*h, bytes).Wait();
}

EngineCounters Engine::counters() const {
  if (Status q = impl_->Quiesce(); !q.ok()) LogError("{}", q.message());
  const auto s = impl_->scaler.state();
  return {impl_->counters.adam_steps, s.scale, s.clean_steps, s.hysteresis_left};
}

void Engine::set_counters(const EngineCounters& c) {
  if (Status q = impl_->Quiesce(); !q.ok()) LogError("{}", q.message());
  impl_->counters.adam_steps = c.adam_steps;
  impl_->scaler.set_state({c.loss_scale, c.clean_steps, c.hysteresis_left});
}

std::vector<Engine::ParamInfo> Engine::BlockParams(int block) const {
  std::vector<ParamInfo> out;
  for (const ParamSlot& s : impl_->model.blocks.at(block).slots) out.push_back({s.name, s.shape, s.offset, s.numel});
  return out;
}

Status Engine::Finish() {
  STRATA_RETURN_IF_ERROR(impl_->Quiesce());
  STRATA_RETURN_IF_ERROR(impl_->dev->Synchronize());
  return impl_->store->FlushWrites();
}

const ShardPlan& Engine::plan() const { return impl_->plan; }
int Engine::num_blocks() const { return impl_->num_blocks(); }
const MemoryLedger& Engine::ledger() const { return impl_->ledger; }
bool Engine::UpdateInFlight() const { return !impl_->optimizer.run.done.Ready(); }
uint64_t Engine::swap_bytes_on_disk() const {
  const NvmeTier* nvme = impl_->store->nvme();
  return nvme ? nvme->bytes_on_disk() : 0;
}
NvmeTierStats Engine::nvme_stats() const {
  const NvmeTier* nvme = impl_->store->nvme();
  return nvme ? nvme->stats() : NvmeTierStats{};
}
uint64_t Engine::prefetch_high_water_bytes() const { return impl_->counters.prefetch_high_water; }
uint64_t Engine::prefetch_budget_bytes() const {
  return std::max<uint64_t>(1, impl_->cfg.prefetch_bucket_size * DTypeSize(impl_->cfg.compute_dtype));
}
const CreationStats& Engine::creation() const { return impl_->creation; }
const TrainConfig& Engine::config() const { return impl_->cfg; }

}  // namespace strata
