// The Engine's set-up (Init executes the ShardPlan: pools, store, blocks, scratch) and its
// state access (checkpoints, export, counters). The step is in engine_step.cc, the
// optimizer in engine_optimizer.cc.
#include "src/engine/engine.h"

#include <cstring>

#include "src/engine/engine_impl.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {
namespace {

Tier TierOf(Residence r) { return r == Residence::kNvme ? Tier::kNvme : Tier::kCpu; }

std::span<const std::byte> BytesOf(const torch::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size())};
}

// Tracer seconds of a steady_clock time point: the store reports I/O and waits in those.
std::function<double(std::chrono::steady_clock::time_point)> TraceClock(Tracer* t) {
  const auto epoch = std::chrono::steady_clock::now() -
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(t->Now()));
  return [epoch](std::chrono::steady_clock::time_point tp) {
    return std::chrono::duration<double>(tp - epoch).count();
  };
}

}  // namespace

HostArrays::~HostArrays() {
  for (auto [p, bytes] : allocs_) FreeHostMemory(p, bytes);
}

StatusOr<std::byte*> HostArrays::Allocate(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(std::byte * p, AllocateHostMemory(bytes));
  allocs_.push_back({p, bytes});
  return p;
}

void HostArrays::ZeroAll() {
  for (auto [p, bytes] : allocs_) std::memset(p, 0, bytes);
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

StatusOr<std::unique_ptr<Engine>> Engine::Create(const TrainConfig& config, Communicator* comm, Tracer* tracer,
                                                EngineHooks hooks, ComputeDevice* device) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
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
  phase("allocating and pinning host buffers");
  STRATA_RETURN_IF_ERROR(CreatePools());  // first: the store registers them with io_uring
  phase("opening the swap store");
  STRATA_RETURN_IF_ERROR(OpenStore(hooks));
  model.blocks.resize(plan.blocks.size());
  for (int b = 0; b < num_blocks(); ++b) {
    phase(fmt::format("building block {} of {} (initial weights and optimizer states, written to their tiers)", b + 1,
                      num_blocks()));
    STRATA_RETURN_IF_ERROR(BuildBlock(b, hooks));
  }
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

Status Engine::Impl::CreatePools() {
  auto make = [&](const PoolPlan& p, std::unique_ptr<PinnedPool>* out) -> Status {
    if (p.count == 0) return Status();
    STRATA_ASSIGN_OR_RETURN(*out, PinnedPool::Create(p.count, p.buffer_bytes, p.pin ? dev->MakeHostPinner() : nullptr));
    ledger.Add(StateKind::kPinnedBuffers, Residence::kCpu, (*out)->region().size());
    return Status();
  };
  STRATA_RETURN_IF_ERROR(make(plan.param_pool, &pools.param));
  return make(plan.optim_pool, &pools.optim);
}

Status Engine::Impl::OpenStore(const EngineHooks& hooks) {
  TieredStoreOptions so;
  so.nvme.wrap_engine = hooks.wrap_io_engine;
  so.pin_cpu_tier = cfg.offload_optimizer.pin_memory;
  so.cpu_pinner = dev->MakeHostPinner();
  const bool optim_nvme = plan.optimizer_home == Residence::kNvme;
  so.enable_nvme = optim_nvme || cfg.offload_param.device == OffloadDevice::kNvme;
  so.nvme.dir = optim_nvme ? cfg.offload_optimizer.nvme_path : cfg.offload_param.nvme_path;
  so.nvme.rank = comm->rank();
  so.nvme.block_size = static_cast<uint32_t>(cfg.aio.block_size);
  so.nvme.queue_depth = static_cast<unsigned>(cfg.aio.queue_depth);
  so.nvme.verify_checksums = cfg.verify_checksums;
  // Every NVMe transfer of a step reads into or writes from the pools: registered with
  // io_uring, as bench io's buffers are, so that what bench io measures is what training does.
  for (PinnedPool* pool : {pools.param.get(), pools.optim.get()})
    if (pool)
      for (auto r : pool->Regions()) so.nvme.registered_buffers.push_back(r);
  if (tracer) {
    Tracer* t = tracer;
    auto sec = TraceClock(t);
    so.nvme.on_io = [t, sec](IoOp op, const std::string& name, uint64_t bytes, auto start, auto end) {
      t->Add(op == IoOp::kRead ? Track::kNvmeRead : Track::kNvmeWrite, name, sec(start), sec(end), bytes);
    };
    so.on_wait = [t, sec](const std::string& what, auto start, auto end) {
      t->Add(Track::kWait, "wait " + what, sec(start), sec(end), 0);
    };
  }
  STRATA_ASSIGN_OR_RETURN(store, TieredStore::Create(so));
  return Status();
}

// Builds block b's module (initial weights from the seed, or the hook), flattens it, stores
// this rank's ranges and allocates its gradient accumulator.
Status Engine::Impl::BuildBlock(int b, const EngineHooks& hooks) {
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  const bool owner = model.tie && b == model.tie->owner_block;
  int64_t numel = 0;
  STRATA_RETURN_IF_ERROR(TorchCall("model", [&] {
    br.module = model::MakeBlock(*model.spec, b);
    for (const auto& item : br.module->named_parameters(/*recurse=*/true)) {
      const torch::Tensor& p = item.value();
      br.slots.push_back({item.key(), p.sizes().vec(), numel, p.numel()});
      br.params.push_back(p);
      if (owner && item.key() == model.tie->owner_param) br.tied_slot = static_cast<int>(br.slots.size() - 1);
      numel += p.numel();
    }
  }));
  STRATA_CHECK(numel == bp.layout.numel) << "block " << b << " has " << numel << " parameters, the plan "
                                         << bp.layout.numel;
  if (hooks.init_weights) {
    NamedTensors named;
    for (size_t i = 0; i < br.params.size(); ++i) named.push_back({br.slots[i].name, br.params[i].detach()});
    Status hs;
    STRATA_RETURN_IF_ERROR(TorchCall("init weights", [&] {
      torch::NoGradGuard no_grad;
      hs = hooks.init_weights(b, named);
    }));
    STRATA_RETURN_IF_ERROR(hs.WithContext(fmt::format("initial weights of block {}", b)));
  }
  if (owner && br.tied_slot < 0)
    return Status(StatusCode::kInternal, fmt::format("tied parameter '{}' not found in block {}", model.tie->owner_param, b));

  // The initial flat group (fp32, padded); freed once this rank's ranges are stored.
  torch::Tensor flat;
  STRATA_RETURN_IF_ERROR(TorchCall("flatten", [&] {
    flat = torch::zeros({bp.layout.padded}, torch::kFloat32);
    for (size_t i = 0; i < br.params.size(); ++i)
      flat.narrow(0, br.slots[i].offset, br.slots[i].numel).copy_(br.params[i].detach().reshape(-1));
  }));
  STRATA_RETURN_IF_ERROR(StoreInitialState(b, flat));
  STRATA_ASSIGN_OR_RETURN(br.grad, grads.Allocate(bp.grad.len * plan.gsize));
  ledger.Add(StateKind::kGradAccum, Residence::kCpu, bp.grad.len * plan.gsize);
  // The module keeps no weights of its own: they are views of a gather buffer when it runs.
  for (auto& p : br.params) p.set_data(torch::empty({0}, torch::TensorOptions().dtype(compute_scalar())));
  return Status();
}

// Registers block b's tensors (plan.Keys() names) and writes their initial values: the
// working range in the compute dtype, fp32 master weights, zero Adam moments.
Status Engine::Impl::StoreInitialState(int b, const torch::Tensor& flat) {
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  auto add = [&](const TensorKey& key, std::span<const std::byte> bytes, TensorHandle* h) -> Status {
    const bool working = key.role == TensorRole::kWorking;
    const Residence home = working ? plan.WorkingResidence(b) : plan.optimizer_home;
    STRATA_ASSIGN_OR_RETURN(*h, store->Register(key.Name(), bytes.size(), TierOf(home)));
    STRATA_RETURN_IF_ERROR(store->Write(*h, bytes).Wait());
    const StateKind kind = working                              ? StateKind::kWorking
                           : key.role == TensorRole::kMaster ? StateKind::kMaster
                           : key.role == TensorRole::kAdamM  ? StateKind::kAdamM
                                                              : StateKind::kAdamV;
    ledger.Add(kind, home, bytes.size());
    return Status();
  };
  torch::Tensor working, zeros;
  STRATA_RETURN_IF_ERROR(TorchCall("initial state", [&] {
    working = flat.narrow(0, bp.working.begin, bp.working.len).to(compute_scalar()).contiguous();
    zeros = torch::zeros({std::min(bp.sub_group_step, bp.optimizer.len)}, torch::kFloat32);
  }));
  if (plan.resident[b]) {  // its home is the device: no store tensor
    bufs.resident.resize(plan.blocks.size());
    bufs.resident_ready.resize(plan.blocks.size());
    STRATA_RETURN_IF_ERROR(TorchCall("resident weights", [&] {
      bufs.resident[b] = torch::empty({bp.working.len}, torch::TensorOptions().device(dev->device()).dtype(compute_scalar()));
    }));
    STRATA_RETURN_IF_ERROR(dev->CopyIn(bufs.resident[b], working.data_ptr(), {}).HostWait());
    ledger.Add(StateKind::kWorking, Residence::kDevice, BytesOf(working).size());
  } else {
    STRATA_RETURN_IF_ERROR(add({b, TensorRole::kWorking, 0}, BytesOf(working), &br.working));
  }
  for (int64_t i = 0; i < bp.num_sub_groups(); ++i) {
    const ElementRange r = bp.sub_group(i);
    SubGroup sg{r, {}, {}, {}};
    const auto z = BytesOf(zeros).subspan(0, r.len * plan.msize);  // zero moments, fp32 or bf16
    torch::Tensor master;  // contiguous: a view of the flat group
    STRATA_RETURN_IF_ERROR(TorchCall("initial state", [&] { master = flat.narrow(0, r.begin, r.len); }));
    STRATA_RETURN_IF_ERROR(add({b, TensorRole::kMaster, r.begin}, BytesOf(master), &sg.master));
    STRATA_RETURN_IF_ERROR(add({b, TensorRole::kAdamM, r.begin}, z, &sg.m));
    STRATA_RETURN_IF_ERROR(add({b, TensorRole::kAdamV, r.begin}, z, &sg.v));
    br.subs.push_back(sg);
  }
  return Status();
}

Status Engine::Impl::AllocateDeviceBuffers() {
  const auto on = torch::TensorOptions().device(dev->device());
  const auto host = torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(dev->device().is_cuda());
  const int64_t shard_in = dev->is_host() ? 0 : plan.max_shard;
  auto slot = [&](int64_t padded, GatherSlot* g) {
    g->full = torch::empty({padded}, on.dtype(compute_scalar()));
    g->shard_in = torch::empty({shard_in}, on.dtype(compute_scalar()));
    ledger.Add(StateKind::kGatherBuffers, Residence::kDevice, padded * g->full.element_size());
  };
  STRATA_RETURN_IF_ERROR(TorchCall("device buffers", [&] {
    bufs.gather.resize(plan.gather_slots);
    for (GatherSlot& g : bufs.gather) slot(plan.max_padded, &g);
    if (plan.tied_slot) slot(plan.blocks[plan.tied_owner].layout.padded, &bufs.tied);
    bufs.grads.resize(plan.grad_slots);
    for (GradSlot& g : bufs.grads) {
      g.flat = torch::zeros({plan.max_padded}, on.dtype(torch::kFloat32));
      g.reduced = torch::zeros({plan.max_shard}, on.dtype(torch::kFloat32));
      if (!dev->is_host()) g.host = torch::empty({plan.grads_sharded ? plan.max_shard : plan.max_padded}, host);
    }
    if (model.tie) bufs.pending_tied = torch::zeros({plan.tied_numel}, on.dtype(torch::kFloat32));
  }));
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
  for (const SubGroup& sg : br.subs) {
    torch::Tensor part = full.narrow(0, sg.range.begin, sg.range.len);
    auto dst = std::span<std::byte>(static_cast<std::byte*>(part.data_ptr()), sg.range.len * 4);
    STRATA_RETURN_IF_ERROR(m.store->Read(sg.master, dst).Wait());
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
  std::vector<std::byte> buf;
  auto one = [&](const TensorKey& key, TensorHandle h) -> Status {
    buf.resize(m.store->bytes(h));
    STRATA_RETURN_IF_ERROR(m.store->Read(h, buf).Wait());
    return visit(key, buf);
  };
  for (int b = 0; b < m.num_blocks(); ++b) {
    const BlockRuntime& br = m.model.blocks[b];
    if (m.plan.resident[b]) {  // on the device: copied out
      const torch::Tensor& t = m.bufs.resident[b];
      buf.resize(t.nbytes());
      STRATA_RETURN_IF_ERROR(m.dev->CopyOut(buf.data(), t, {m.bufs.resident_ready[b]}).HostWait());
      STRATA_RETURN_IF_ERROR(visit({b, TensorRole::kWorking, 0}, buf));
    } else {
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kWorking, 0}, br.working));
    }
    for (const SubGroup& sg : br.subs) {
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kMaster, sg.range.begin}, sg.master));
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kAdamM, sg.range.begin}, sg.m));
      STRATA_RETURN_IF_ERROR(one({b, TensorRole::kAdamV, sg.range.begin}, sg.v));
    }
  }
  return Status();
}

Status Engine::RestoreState(const TensorKey& key, std::span<const std::byte> bytes) {
  Impl& m = *impl_;
  STRATA_RETURN_IF_ERROR(m.Quiesce());
  if (key.role == TensorRole::kWorking && key.block >= 0 && key.block < m.num_blocks() && m.plan.resident[key.block]) {
    const torch::Tensor& t = m.bufs.resident[key.block];
    if (bytes.size() != t.nbytes())
      return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(),
                   t.nbytes(), bytes.size());
    STRATA_RETURN_IF_ERROR(m.dev->Synchronize());  // nothing still reads the old weights
    m.bufs.resident_ready[key.block] = m.dev->CopyIn(t, bytes.data(), {});
    return m.bufs.resident_ready[key.block].HostWait();  // `bytes` is the caller's
  }
  std::optional<TensorHandle> h;
  if (key.block >= 0 && key.block < m.num_blocks()) {
    const BlockRuntime& br = m.model.blocks[key.block];
    if (key.role == TensorRole::kWorking) h = br.working;
    for (const SubGroup& sg : br.subs)
      if (key.role != TensorRole::kWorking && sg.range.begin == key.offset)
        h = key.role == TensorRole::kMaster ? sg.master : key.role == TensorRole::kAdamM ? sg.m : sg.v;
  }
  if (!h) return Error(StatusCode::kNotFound, "no tensor '{}' in this run's state", key.Name());
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
const TrainConfig& Engine::config() const { return impl_->cfg; }

}  // namespace strata
