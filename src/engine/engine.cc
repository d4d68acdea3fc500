#include "src/engine/engine.h"

#include <cmath>
#include <cstring>

#include "src/engine/engine_impl.h"
#include "src/engine/lr_schedule.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {

uint64_t MemoryLedger::Total(Residence r) const {
  uint64_t t = 0;
  for (int k = 0; k < kNumStateKinds; ++k) t += bytes[k][static_cast<int>(r)];
  return t;
}
uint64_t MemoryLedger::Of(StateKind k) const {
  return bytes[static_cast<int>(k)][0] + bytes[static_cast<int>(k)][1] + bytes[static_cast<int>(k)][2];
}

namespace {

Residence ResidenceOf(OffloadDevice d) {
  return d == OffloadDevice::kNone ? Residence::kDevice : d == OffloadDevice::kCpu ? Residence::kCpu : Residence::kNvme;
}
Tier TierOf(OffloadDevice d) { return d == OffloadDevice::kNvme ? Tier::kNvme : Tier::kCpu; }

torch::ScalarType ScalarOf(DType t) {
  return t == DType::kBF16 ? torch::kBFloat16 : t == DType::kF16 ? torch::kHalf : torch::kFloat32;
}

std::span<const std::byte> BytesOf(const torch::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size())};
}

// Runs a LibTorch call, turning its exceptions into a Status (STYLE rule 4).
template <typename F>
Status TorchCall(const char* what, F&& f) {
  try {
    f();
    return Status();
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (!impl_) return;
  impl_->DropEarlyStates();
  impl_->RetireWrites(/*all=*/true);
  impl_->store.reset();
  for (size_t i = 0; i < impl_->host_allocs.size(); ++i)
    FreeHostMemory(reinterpret_cast<std::byte*>(impl_->host_allocs[i]), impl_->host_alloc_bytes[i]);
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const TrainConfig& config, Communicator* comm, Tracer* tracer,
                                                EngineHooks hooks, const ComputeDevice* device) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  impl->hooks = std::move(hooks);
  impl->comm = comm;
  if (device) impl->dev = *device;
  impl->dcomm = impl->dev.collectives() ? impl->dev.collectives() : comm;
  if (!impl->dev.device().is_cpu() && !impl->dev.collectives())
    return InvalidArgument("compute device {} needs a communicator for device buffers (NCCL)", impl->dev.device().str());
  if (impl->dcomm->world_size() != comm->world_size() || impl->dcomm->rank() != comm->rank())
    return InvalidArgument("the device communicator ({} of {}) and the host communicator ({} of {}) disagree",
                           impl->dcomm->rank(), impl->dcomm->world_size(), comm->rank(), comm->world_size());
  impl->tracer = tracer;
  STRATA_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::Impl::Init() {
  stage = cfg.zero_stage;
  weights_sharded = stage == 3;
  grads_sharded = stage >= 2;
  optim_sharded = stage >= 1;
  compute = ScalarOf(cfg.compute_dtype);
  scaler = LossScaler(cfg.loss_scale, cfg.compute_dtype == DType::kF16);
  if (!cfg.adam_w_mode && cfg.weight_decay > 0)
    return InvalidArgument("optimizer: Adam with L2 weight decay (adam_w_mode false) is not supported; use AdamW");
  spec = std::make_unique<model::ModelSpec>(cfg.model);
  tie = spec->tie();
  const int world = comm->world_size(), rank = comm->rank();
  const size_t dsize = DTypeSize(cfg.compute_dtype);

  // The store: one swap folder per rank when anything lives on NVMe.
  TieredStoreOptions so;
  so.pin_cpu_tier = cfg.offload_optimizer.pin_memory;
  so.cpu_pinner = dev.MakeHostPinner();
  const bool param_nvme = cfg.offload_param.device == OffloadDevice::kNvme;
  const bool optim_nvme = cfg.offload_optimizer.device == OffloadDevice::kNvme;
  so.enable_nvme = param_nvme || optim_nvme;
  so.nvme.dir = optim_nvme ? cfg.offload_optimizer.nvme_path : cfg.offload_param.nvme_path;
  so.nvme.rank = rank;
  so.nvme.block_size = static_cast<uint32_t>(cfg.aio.block_size);
  so.nvme.queue_depth = static_cast<unsigned>(cfg.aio.queue_depth);
  so.nvme.verify_checksums = cfg.verify_checksums;
  if (tracer) {
    Tracer* t = tracer;
    const auto epoch = std::chrono::steady_clock::now() - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(t->Now()));
    so.nvme.on_io = [t, epoch](IoOp op, const std::string& name, uint64_t bytes, auto start, auto end) {
      auto sec = [&](auto tp) { return std::chrono::duration<double>(tp - epoch).count(); };
      t->Add(op == IoOp::kRead ? Track::kNvmeRead : Track::kNvmeWrite, name, sec(start), sec(end), bytes);
    };
  }
  STRATA_ASSIGN_OR_RETURN(store, TieredStore::Create(so));

  const Tier param_tier = TierOf(cfg.offload_param.device), optim_tier = TierOf(cfg.offload_optimizer.device);
  const int pres = static_cast<int>(ResidenceOf(cfg.offload_param.device));
  const int ores = static_cast<int>(ResidenceOf(cfg.offload_optimizer.device));
  int64_t max_padded = 0, max_shard = 0, max_working = 0, max_sub = 0;

  groups.resize(spec->num_blocks());
  for (int b = 0; b < spec->num_blocks(); ++b) {
    Group& g = groups[b];
    g.index = b;
    Status s = TorchCall("model", [&] {
      g.module = spec->MakeBlock(b);
      int64_t offset = 0;
      for (const auto& item : g.module->named_parameters(/*recurse=*/true)) {
        const torch::Tensor& p = item.value();
        g.slots.push_back({item.key(), p.sizes().vec(), offset, p.numel()});
        g.params.push_back(p);
        if (tie && b == tie->owner_block && item.key() == tie->owner_param) g.tied_slot = static_cast<int>(g.slots.size() - 1);
        offset += p.numel();
      }
      g.layout = MakeShardLayout(offset, world, rank);
    });
    STRATA_RETURN_IF_ERROR(s);
    if (hooks.init_weights) {
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (size_t i = 0; i < g.params.size(); ++i) named.push_back({g.slots[i].name, g.params[i].detach()});
      Status hs;
      Status ts = TorchCall("init weights", [&] {
        torch::NoGradGuard no_grad;
        hs = hooks.init_weights(b, named);
      });
      STRATA_RETURN_IF_ERROR(ts);
      STRATA_RETURN_IF_ERROR(hs.WithContext(fmt::format("initial weights of block {}", b)));
    }
    if (tie && b == tie->owner_block && g.tied_slot < 0)
      return Status(StatusCode::kInternal, fmt::format("tied parameter '{}' not found in block {}", tie->owner_param, b));

    // The initial flat group (fp32, padded); freed once this rank's ranges are stored.
    torch::Tensor flat = torch::zeros({g.layout.padded}, torch::kFloat32);
    for (size_t i = 0; i < g.params.size(); ++i)
      flat.narrow(0, g.slots[i].offset, g.slots[i].numel).copy_(g.params[i].detach().reshape(-1));

    g.working_begin = weights_sharded ? g.layout.begin() : 0;
    g.working_len = weights_sharded ? g.layout.shard : g.layout.padded;
    torch::Tensor working = flat.narrow(0, g.working_begin, g.working_len).to(compute).contiguous();
    STRATA_ASSIGN_OR_RETURN(g.working, store->Register(fmt::format("block{}.working", b), working.numel() * dsize, param_tier));
    STRATA_RETURN_IF_ERROR(store->Write(g.working, BytesOf(working)).Wait());
    ledger.bytes[static_cast<int>(StateKind::kWorking)][pres] += working.numel() * dsize;

    g.opt_begin = optim_sharded ? g.layout.begin() : 0;
    g.opt_len = optim_sharded ? g.layout.shard : g.layout.padded;
    const torch::Tensor zeros = torch::zeros({std::min<int64_t>(g.opt_len, cfg.sub_group_size)}, torch::kFloat32);
    for (auto [lo, hi] : SplitRange(g.opt_len, cfg.sub_group_size)) {
      SubGroup sg;
      sg.begin = g.opt_begin + lo;
      sg.len = hi - lo;
      const uint64_t bytes = sg.len * 4;
      const std::string base = fmt::format("block{}.{}", b, sg.begin);
      STRATA_ASSIGN_OR_RETURN(sg.master, store->Register(base + ".master", bytes, optim_tier));
      STRATA_ASSIGN_OR_RETURN(sg.m, store->Register(base + ".adam_m", bytes, optim_tier));
      STRATA_ASSIGN_OR_RETURN(sg.v, store->Register(base + ".adam_v", bytes, optim_tier));
      torch::Tensor master = flat.narrow(0, sg.begin, sg.len).contiguous();
      const auto z = BytesOf(zeros).subspan(0, bytes);
      STRATA_RETURN_IF_ERROR(store->Write(sg.master, BytesOf(master)).Wait());
      STRATA_RETURN_IF_ERROR(store->Write(sg.m, z).Wait());
      STRATA_RETURN_IF_ERROR(store->Write(sg.v, z).Wait());
      for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV})
        ledger.bytes[static_cast<int>(k)][ores] += bytes;
      max_sub = std::max(max_sub, sg.len);
      g.subs.push_back(sg);
    }

    g.grad_begin = grads_sharded ? g.layout.begin() : 0;
    g.grad_len = grads_sharded ? g.layout.shard : g.layout.padded;
    STRATA_ASSIGN_OR_RETURN(std::byte * acc, AllocateHostMemory(g.grad_len * 4));
    g.grad_acc = reinterpret_cast<float*>(acc);
    host_allocs.push_back(g.grad_acc);
    host_alloc_bytes.push_back(g.grad_len * 4);
    ledger.bytes[static_cast<int>(StateKind::kGradAccum)][static_cast<int>(Residence::kCpu)] += g.grad_len * 4;

    // The module keeps no weights of its own: they are views of a gather buffer when it runs.
    for (auto& p : g.params) p.set_data(torch::empty({0}, torch::TensorOptions().dtype(compute)));
    max_padded = std::max(max_padded, g.layout.padded);
    max_shard = std::max(max_shard, g.layout.shard);
    max_working = std::max<int64_t>(max_working, g.working_len * dsize);
  }

  // Scratch on the compute device.
  Status ds = TorchCall("device buffers", [&] {
    const auto on = torch::TensorOptions().device(dev.device());
    gather[0] = torch::empty({max_padded}, on.dtype(compute));
    gather[1] = tie ? torch::empty({groups[tie->owner_block].layout.padded}, on.dtype(compute)) : torch::Tensor();
    flat_grad = torch::zeros({max_padded}, on.dtype(torch::kFloat32));
    reduced = torch::zeros({max_shard}, on.dtype(torch::kFloat32));
    if (tie)
      pending_tied = torch::zeros({groups[tie->owner_block].slots[groups[tie->owner_block].tied_slot].numel},
                                  on.dtype(torch::kFloat32));
    if (!dev.is_host()) {
      shard_in = torch::empty({max_shard}, on.dtype(compute));
      grad_host = torch::empty({grads_sharded ? max_shard : max_padded},
                               torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(dev.device().is_cuda()));
    }
  });
  STRATA_RETURN_IF_ERROR(ds);
  ledger.bytes[static_cast<int>(StateKind::kGatherBuffers)][static_cast<int>(Residence::kDevice)] +=
      (gather[0].numel() + (tie ? gather[1].numel() : 0)) * dsize;

  auto pinner = [&](bool pin) { return pin ? dev.MakeHostPinner() : nullptr; };
  if (param_nvme) {
    const size_t count = std::max<int64_t>(3, cfg.offload_param.buffer_count);
    STRATA_ASSIGN_OR_RETURN(param_pool, PinnedPool::Create(count, max_working, pinner(cfg.offload_param.pin_memory)));
    ledger.bytes[static_cast<int>(StateKind::kPinnedBuffers)][static_cast<int>(Residence::kCpu)] +=
        param_pool->region().size();
  }
  if (optim_nvme) {
    // 3 states x (the sub-group being updated + the next one being read + writes of two).
    STRATA_ASSIGN_OR_RETURN(optim_pool, PinnedPool::Create(12, max_sub * 4, pinner(cfg.offload_optimizer.pin_memory)));
    ledger.bytes[static_cast<int>(StateKind::kPinnedBuffers)][static_cast<int>(Residence::kCpu)] +=
        optim_pool->region().size();
  }
  // Every NVMe transfer of a step reads into or writes from these pools: registered with
  // io_uring, as bench io's buffers are, so that what bench io measures is what training does.
  std::vector<std::span<std::byte>> io_regions;
  for (PinnedPool* pool : {param_pool.get(), optim_pool.get()})
    if (pool) for (auto r : pool->Regions()) io_regions.push_back(r);
  if (!io_regions.empty()) STRATA_RETURN_IF_ERROR(store->RegisterIoBuffers(io_regions));
  return Status();
}

// The groups whose working weights one micro-batch reads, in order: forward 0..N-2, the
// head (after the tied owner), then, when training, backward N-2..0.
std::vector<int> Engine::Impl::VisitPlan(int micro_batches, bool backward) const {
  const int n = static_cast<int>(groups.size());
  std::vector<int> plan;
  for (int mb = 0; mb < micro_batches; ++mb) {
    for (int b = 0; b < n - 1; ++b) plan.push_back(b);
    if (tie) plan.push_back(tie->owner_block);
    plan.push_back(n - 1);
    if (backward)
      for (int b = n - 2; b >= 0; --b) plan.push_back(b);
  }
  return plan;
}

// Null when working weights are not on NVMe (nothing to prefetch). A pool without a free
// buffer reclaims one by waiting for the oldest write-back.
std::unique_ptr<PrefetchScheduler> Engine::Impl::MakePrefetcher(std::vector<int> plan) {
  if (!param_pool) return nullptr;
  const size_t dsize = DTypeSize(cfg.compute_dtype);
  return std::make_unique<PrefetchScheduler>(
      std::move(plan), [this, dsize](int g) { return static_cast<uint64_t>(groups[g].working_len * dsize); },
      std::max<uint64_t>(1, cfg.prefetch_bucket_size * dsize), param_pool.get(),
      [this](int g, std::span<std::byte> dst) { return ReadAfterPendingWrite(groups[g].working, dst); },
      [this] { return ReclaimWriteBuffers(); }, tracer);
}

bool Engine::Impl::ReclaimWriteBuffers() {
  if (write_queue.empty()) return false;
  RetireWrites(/*all=*/false);
  if (!write_queue.empty()) {
    Tracer::Span span(tracer, Track::kWait, "wait write-back (buffers)");
    write_queue.front()->ticket.Wait().IgnoreError();
    RetireWrites(false);
  }
  return true;
}

Status Engine::Impl::BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets) const {
  return TorchCall("batch to the device", [&] {
    *inputs = batch.inputs.to(dev.device());
    *targets = batch.targets.to(dev.device());
  });
}

Ticket Engine::Impl::ReadAfterPendingWrite(TensorHandle h, std::span<std::byte> dst) {
  auto it = pending_writes.find(h.index);
  if (it != pending_writes.end()) {
    std::shared_ptr<PendingWrite> w = it->second;
    pending_writes.erase(it);
    if (!w->ticket.Done()) {
      Tracer::Span span(tracer, Track::kWait, "wait write-back " + store->name(h));
      if (Status s = w->ticket.Wait(); !s.ok()) return Ticket::Failed(s);
    } else if (Status s = w->ticket.Wait(); !s.ok()) {
      return Ticket::Failed(s);
    }
  }
  return store->Read(h, dst);
}

void Engine::Impl::RetireWrites(bool all) {
  while (!write_queue.empty() && (all || write_queue.front()->ticket.Done())) {
    Status s = write_queue.front()->ticket.Wait();
    if (!s.ok()) LogError("write-back failed: {}", s.message());  // the tensor is now refused on read
    write_queue.front()->leases.clear();
    write_queue.pop_front();
  }
}

Status Engine::Impl::Gather(int g, int slot, PrefetchScheduler* prefetch) {
  Group& grp = groups[g];
  torch::Tensor full = gather[slot].narrow(0, 0, grp.layout.padded);
  // The gather buffer may still be read by device work queued for the previous block.
  STRATA_RETURN_IF_ERROR(dev.WaitForCompute());
  if (!weights_sharded) {
    STRATA_RETURN_IF_ERROR(dev.CopyIn(full, store->CpuMemory(grp.working).data()));
  } else {
    PinnedBuffer lease;
    const std::byte* src;
    if (store->home(grp.working) == Tier::kCpu) {
      src = store->CpuMemory(grp.working).data();
    } else {
      STRATA_ASSIGN_OR_RETURN(lease, prefetch->Take(g));
      src = lease.data();
    }
    if (!dev.is_host()) {
      torch::Tensor shard = shard_in.narrow(0, 0, grp.layout.shard);
      STRATA_RETURN_IF_ERROR(dev.CopyIn(shard, src));
      src = static_cast<const std::byte*>(shard.data_ptr());
    }
    Tracer::Span span(tracer, Track::kComm, "all-gather g" + std::to_string(g));
    STRATA_RETURN_IF_ERROR(dcomm->AllGather(src, full.data_ptr(), grp.layout.shard, cfg.compute_dtype));
  }
  Bind(g, slot);
  return Status();
}

void Engine::Impl::Bind(int g, int slot) {
  Group& grp = groups[g];
  torch::Tensor full = gather[slot];
  for (size_t i = 0; i < grp.params.size(); ++i) {
    const ParamSlot& s = grp.slots[i];
    grp.params[i].set_data(full.narrow(0, s.offset, s.numel).view(s.shape));
  }
}

Status Engine::Impl::ReduceGradients(int g) {
  Group& grp = groups[g];
  torch::Tensor flat = flat_grad.narrow(0, 0, grp.layout.padded);
  {
    Tracer::Span span(tracer, Track::kCompute, "flatten grads g" + std::to_string(g));
    flat.zero_();
    for (size_t i = 0; i < grp.params.size(); ++i) {
      const torch::Tensor& grad = grp.params[i].grad();
      if (grad.defined()) flat.narrow(0, grp.slots[i].offset, grp.slots[i].numel).copy_(grad.reshape(-1));
      grp.params[i].mutable_grad().reset();
    }
    if (tie && g == tie->owner_block) {
      flat.narrow(0, grp.slots[grp.tied_slot].offset, pending_tied.numel()).add_(pending_tied);
      pending_tied.zero_();
    }
  }
  const double inv = 1.0 / (static_cast<double>(cfg.grad_accum) * comm->world_size());
  torch::Tensor acc = torch::from_blob(grp.grad_acc, {grp.grad_len}, torch::kFloat32);
  STRATA_RETURN_IF_ERROR(dev.WaitForCompute());  // the collective's stream reads `flat`
  torch::Tensor out;
  {
    Tracer::Span span(tracer, Track::kComm, (grads_sharded ? "reduce-scatter g" : "all-reduce g") + std::to_string(g));
    if (grads_sharded) {
      out = reduced.narrow(0, 0, grp.layout.shard);
      STRATA_RETURN_IF_ERROR(
          dcomm->ReduceScatter(flat.data_ptr(), out.data_ptr(), grp.layout.shard, DType::kF32, ReduceOp::kSum));
    } else {
      out = flat;
      STRATA_RETURN_IF_ERROR(dcomm->AllReduce(flat.data_ptr(), grp.layout.padded, DType::kF32, ReduceOp::kSum));
    }
  }
  if (!dev.is_host()) {
    // The shard leaves the device as soon as its collective is done; the accumulation is
    // the host's (the CPU Adam reads it there).
    Tracer::Span span(tracer, Track::kWait, "gradients to host g" + std::to_string(g));
    torch::Tensor host = grad_host.narrow(0, 0, out.numel());
    STRATA_RETURN_IF_ERROR(dev.CopyOut(host.data_ptr(), out));
    out = host;
  }
  acc.add_(out, inv);
  return Status();
}

// One micro-batch: forward keeping block inputs, the head's forward + backward, backward by
// recomputation. `loss` receives the micro-batch's (unscaled) mean loss.
Status Engine::Impl::RunMicroBatch(const data::Batch& batch, PrefetchScheduler* prefetch, double* loss) {
  const int n = static_cast<int>(groups.size());
  std::vector<torch::Tensor> inputs(n);
  torch::Tensor x, targets;
  STRATA_RETURN_IF_ERROR(BatchToDevice(batch, &x, &targets));
  for (int b = 0; b < n - 1; ++b) {
    STRATA_RETURN_IF_ERROR(Gather(b, 0, prefetch));
    Tracer::Span span(tracer, Track::kCompute, "forward b" + std::to_string(b));
    STRATA_RETURN_IF_ERROR(TorchCall("forward", [&] {
      torch::NoGradGuard no_grad;
      inputs[b] = x;
      x = groups[b].module->Forward(x);
    }));
  }
  inputs[n - 1] = x;

  torch::Tensor grad_out;
  {
    if (tie) STRATA_RETURN_IF_ERROR(Gather(tie->owner_block, 1, prefetch));
    STRATA_RETURN_IF_ERROR(Gather(n - 1, 0, prefetch));
    Tracer::Span span(tracer, Track::kCompute, "head fwd+bwd");
    STRATA_RETURN_IF_ERROR(TorchCall("head", [&] {
      Group& head = groups[n - 1];
      if (tie) head.module->BindTiedWeight(groups[tie->owner_block].params[groups[tie->owner_block].tied_slot]);
      torch::Tensor in = inputs[n - 1].detach().requires_grad_(true);
      torch::Tensor l = model::LanguageModelLoss(head.module->Forward(in), targets);
      *loss = l.item<double>();
      (l * scaler.scale()).backward();
      grad_out = in.grad();
      if (tie) {
        torch::Tensor& w = groups[tie->owner_block].params[groups[tie->owner_block].tied_slot];
        if (w.grad().defined()) pending_tied.add_(w.grad().reshape(-1).to(torch::kFloat32));
        w.mutable_grad().reset();
      }
    }));
  }
  STRATA_RETURN_IF_ERROR(ReduceGradients(n - 1));

  for (int b = n - 2; b >= 0; --b) {
    STRATA_RETURN_IF_ERROR(Gather(b, 0, prefetch));
    {
      Tracer::Span span(tracer, Track::kCompute, "backward b" + std::to_string(b));
      STRATA_RETURN_IF_ERROR(TorchCall("backward", [&] {
        if (b == 0) {
          groups[0].module->Forward(inputs[0]).backward(grad_out);
        } else {
          torch::Tensor in = inputs[b].detach().requires_grad_(true);
          groups[b].module->Forward(in).backward(grad_out);
          grad_out = in.grad();
        }
      }));
    }
    STRATA_RETURN_IF_ERROR(ReduceGradients(b));
  }
  return Status();
}

StatusOr<StepStats> Engine::Step(int64_t step, const data::TokenDataset& data) {
  Impl& m = *impl_;
  StepStats st;
  st.step = step;
  const double t0 = m.tracer ? m.tracer->Now() : 0;
  const auto wall0 = std::chrono::steady_clock::now();
  const int world = m.comm->world_size(), rank = m.comm->rank();
  m.RetireWrites(/*all=*/false);
  m.DropEarlyStates();  // left by a step that failed before its optimizer ran

  std::unique_ptr<PrefetchScheduler> prefetch =
      m.MakePrefetcher(m.VisitPlan(static_cast<int>(m.cfg.grad_accum), /*backward=*/true));

  double loss_sum = 0;
  for (int64_t mb = 0; mb < m.cfg.grad_accum; ++mb) {
    const uint64_t index = static_cast<uint64_t>((step * m.cfg.grad_accum + mb) * world + rank);
    data::Batch batch = data.Get(data::Split::kTrain, index, m.cfg.micro_batch);
    if (mb + 1 == m.cfg.grad_accum) m.ReadFirstStatesEarly();  // hidden behind this micro-batch
    double loss = 0;
    Status s = m.RunMicroBatch(batch, prefetch.get(), &loss);
    if (!s.ok()) {
      if (prefetch) prefetch->Drain();
      m.DropEarlyStates();
      return s.WithContext(fmt::format("step {}", step));
    }
    loss_sum += loss;
  }
  if (prefetch) m.prefetch_high_water = std::max(m.prefetch_high_water, prefetch->high_water_bytes());
  prefetch.reset();

  float loss_buf = static_cast<float>(loss_sum);
  STRATA_RETURN_IF_ERROR(m.comm->AllReduce(&loss_buf, 1, DType::kF32, ReduceOp::kSum));
  st.loss = loss_buf / static_cast<double>(m.cfg.grad_accum * world);
  st.loss_scale = m.scaler.scale();
  st.lr = LearningRate(m.cfg, step);

  STRATA_ASSIGN_OR_RETURN(bool applied, m.OptimizerStep(step, &st));
  st.skipped = !applied;
  st.tokens = m.cfg.micro_batch * m.cfg.model.seq_len * m.cfg.grad_accum * world;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (m.tracer) {
    st.wait_s = m.tracer->Total(Track::kWait, t0);
    st.compute_s = m.tracer->Total(Track::kCompute, t0);
    st.comm_s = m.tracer->Total(Track::kComm, t0);
    st.optimizer_s = m.tracer->Total(Track::kOptimizer, t0);
    st.nvme_read_bytes = m.tracer->Bytes(Track::kNvmeRead, t0);
    st.nvme_write_bytes = m.tracer->Bytes(Track::kNvmeWrite, t0);
  }
  return st;
}

StatusOr<double> Engine::EvalLoss(const data::TokenDataset& data, int64_t batches) {
  Impl& m = *impl_;
  const int n = static_cast<int>(m.groups.size());
  const int world = m.comm->world_size(), rank = m.comm->rank();
  m.RetireWrites(false);
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    std::unique_ptr<PrefetchScheduler> prefetch = m.MakePrefetcher(m.VisitPlan(1, /*backward=*/false));
    data::Batch batch = data.Get(data::Split::kEval, static_cast<uint64_t>(i * world + rank), m.cfg.micro_batch);
    torch::Tensor x, targets;
    STRATA_RETURN_IF_ERROR(m.BatchToDevice(batch, &x, &targets));
    for (int b = 0; b < n - 1; ++b) {
      STRATA_RETURN_IF_ERROR(m.Gather(b, 0, prefetch.get()));
      STRATA_RETURN_IF_ERROR(TorchCall("eval", [&] {
        torch::NoGradGuard g;
        x = m.groups[b].module->Forward(x);
      }));
    }
    if (m.tie) STRATA_RETURN_IF_ERROR(m.Gather(m.tie->owner_block, 1, prefetch.get()));
    STRATA_RETURN_IF_ERROR(m.Gather(n - 1, 0, prefetch.get()));
    STRATA_RETURN_IF_ERROR(TorchCall("eval", [&] {
      torch::NoGradGuard g;
      Group& head = m.groups[n - 1];
      if (m.tie) head.module->BindTiedWeight(m.groups[m.tie->owner_block].params[m.groups[m.tie->owner_block].tied_slot]);
      sum += model::LanguageModelLoss(head.module->Forward(x), targets).item<double>();
    }));
  }
  float buf = static_cast<float>(sum);
  STRATA_RETURN_IF_ERROR(m.comm->AllReduce(&buf, 1, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(buf) / static_cast<double>(batches * world);
}

StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> Engine::MasterParameters(int block) {
  Impl& m = *impl_;
  STRATA_CHECK(block >= 0 && block < static_cast<int>(m.groups.size())) << "block " << block;
  Group& g = m.groups[block];
  torch::Tensor full = torch::zeros({g.layout.padded}, torch::kFloat32);
  for (const SubGroup& sg : g.subs) {
    torch::Tensor part = full.narrow(0, sg.begin, sg.len);
    auto dst = std::span<std::byte>(static_cast<std::byte*>(part.data_ptr()), sg.len * 4);
    STRATA_RETURN_IF_ERROR(m.ReadAfterPendingWrite(sg.master, dst).Wait());
  }
  if (m.optim_sharded && m.comm->world_size() > 1) {
    torch::Tensor shard = full.narrow(0, g.layout.begin(), g.layout.shard).clone();
    STRATA_RETURN_IF_ERROR(m.comm->AllGather(shard.data_ptr(), full.data_ptr(), g.layout.shard, DType::kF32));
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const ParamSlot& s : g.slots) out.push_back({s.name, full.narrow(0, s.offset, s.numel).view(s.shape).clone()});
  return out;
}

Status Engine::VisitState(
    const std::function<Status(const std::string& name, std::span<const std::byte> bytes)>& visit) {
  Impl& m = *impl_;
  std::vector<std::byte> buf;
  auto one = [&](TensorHandle h) -> Status {
    buf.resize(m.store->bytes(h));
    STRATA_RETURN_IF_ERROR(m.ReadAfterPendingWrite(h, buf).Wait());
    return visit(m.store->name(h), buf);
  };
  for (const Group& g : m.groups) {
    STRATA_RETURN_IF_ERROR(one(g.working));
    for (const SubGroup& sg : g.subs)
      for (TensorHandle h : {sg.master, sg.m, sg.v}) STRATA_RETURN_IF_ERROR(one(h));
  }
  return Status();
}

Status Engine::RestoreState(const std::string& name, std::span<const std::byte> bytes) {
  Impl& m = *impl_;
  STRATA_ASSIGN_OR_RETURN(TensorHandle h, m.store->Find(name));
  if (bytes.size() != m.store->bytes(h))
    return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", name,
                 m.store->bytes(h), bytes.size());
  auto it = m.pending_writes.find(h.index);
  if (it != m.pending_writes.end()) {
    STRATA_RETURN_IF_ERROR(it->second->ticket.Wait());
    m.pending_writes.erase(it);
  }
  return m.store->Write(h, bytes).Wait();
}

EngineCounters Engine::counters() const {
  const auto s = impl_->scaler.state();
  return {impl_->adam_steps, s.scale, s.clean_steps, s.hysteresis_left};
}

void Engine::set_counters(const EngineCounters& c) {
  impl_->adam_steps = c.adam_steps;
  impl_->scaler.set_state({c.loss_scale, c.clean_steps, c.hysteresis_left});
}

std::vector<Engine::ParamInfo> Engine::BlockParams(int block) const {
  std::vector<ParamInfo> out;
  for (const ParamSlot& s : impl_->groups.at(block).slots) out.push_back({s.name, s.shape, s.offset, s.numel});
  return out;
}
int64_t Engine::BlockPadded(int block) const { return impl_->groups.at(block).layout.padded; }

int Engine::num_blocks() const { return static_cast<int>(impl_->groups.size()); }
const MemoryLedger& Engine::ledger() const { return impl_->ledger; }
uint64_t Engine::swap_bytes_on_disk() const {
  const NvmeTier* nvme = impl_->store->nvme();
  return nvme ? nvme->bytes_on_disk() : 0;
}
NvmeTierStats Engine::nvme_stats() const {
  const NvmeTier* nvme = impl_->store->nvme();
  return nvme ? nvme->stats() : NvmeTierStats{};
}
uint64_t Engine::prefetch_high_water_bytes() const { return impl_->prefetch_high_water; }
uint64_t Engine::prefetch_budget_bytes() const {
  return std::max<uint64_t>(1, impl_->cfg.prefetch_bucket_size * DTypeSize(impl_->cfg.compute_dtype));
}
const TrainConfig& Engine::config() const { return impl_->cfg; }

}  // namespace strata
