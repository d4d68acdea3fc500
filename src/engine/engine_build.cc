// The Engine's creation, after the plan: the pinned pools, the swap store, every block's
// initial state written to its tiers (Note [Building blocks]) and the device buffers.
#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <numeric>
#include <optional>
#include <thread>

#include "src/config/decay_groups.h"
#include "src/engine/engine_impl.h"
#include "src/engine/experts/expert_parts.h"
#include "src/engine/update/newton_schulz.h"
#include "src/model/hf_names.h"
#include "src/model/nf4.h"
#include "strata/cpu_adam.h"
#include "strata/check.h"

namespace strata {
namespace {

using model::IsAdapterName;

// Where the store keeps a state the plan places: its device copy, if any, is the engine's.
Tier StoreTierOf(Tier r) { return r == Tier::kNvme ? Tier::kNvme : Tier::kCpu; }

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

// Note [Pools alongside the blocks]
// Populating and pinning the pools is page faults (~0.3-2 GB/s on this kind of VM, where the
// host takes back idle memory), and the pools are not used before the first step: the initial
// state is written from the creation staging. So on the host device they are made on a helper
// thread while the blocks are built, and registered with io_uring afterwards. That thread
// starts once the staging sets have been drawn into: faults do not go faster for being
// taken on two threads (cold, ~0.5 GB/s here whatever the threads), and made first the
// pools held back the first blocks, and so the disk, for 6 s of a 3 B model's start-up. On a GPU,
// cudaHostRegister runs on the thread bound to the rank's device: in order, before the blocks.
Status Engine::Impl::CreatePools() {
  const auto t0 = std::chrono::steady_clock::now();
  auto make = [&](const PoolPlan& p, std::unique_ptr<PinnedPool>* out) -> Status {
    if (p.count == 0) return Status();
    STRATA_ASSIGN_OR_RETURN(*out, PinnedPool::Create(p.count, p.buffer_bytes, p.pin ? io.dev->MakeHostPinner() : nullptr));
    return Status();
  };
  STRATA_RETURN_IF_ERROR(make(plan.param_pool, &state.pools.param));
  STRATA_RETURN_IF_ERROR(make(plan.optim_pool, &state.pools.optim));
  STRATA_RETURN_IF_ERROR(make(plan.park_pool, &state.pools.park));
  stats.creation.pools_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status();
}

// Counts the pools in the ledger and registers them with io_uring: every NVMe transfer of a
// step reads into or writes from them, as bench io's buffers do, so that what bench io
// measures is what training does.
Status Engine::Impl::RegisterPools() {
  std::vector<std::span<std::byte>> regions;
  for (PinnedPool* pool : {state.pools.param.get(), state.pools.optim.get(), state.pools.park.get()}) {
    if (!pool) continue;
    stats.ledger.Add(StateKind::kPinnedBuffers, Tier::kCpu, pool->region().size());
    stats.creation.pool_bytes += pool->region().size();
    for (auto r : pool->Regions()) regions.push_back(r);
  }
  return state.store->RegisterIoBuffers(regions);
}

Status Engine::Impl::OpenStore(const EngineHooks& hooks) {
  TieredStoreOptions so;
  so.nvme.wrap_engine = hooks.wrap_io_engine;
  so.pin_cpu_tier = cfg.offload_optimizer.pin_memory;
  so.cpu_pinner = io.dev->MakeHostPinner();
  const bool optim_nvme = plan.optimizer_home == Tier::kNvme;
  so.enable_nvme = optim_nvme || cfg.offload_param.device == Tier::kNvme;
  so.nvme.dir = optim_nvme ? cfg.offload_optimizer.nvme_path : cfg.offload_param.nvme_path;
  so.nvme.rank = io.comm->rank();
  so.nvme.block_size = static_cast<uint32_t>(cfg.aio.block_size);
  so.nvme.queue_depth = static_cast<unsigned>(cfg.aio.queue_depth);
  so.nvme.verify_checksums = cfg.verify_checksums;
  if (io.tracer) {
    Tracer* t = io.tracer;
    auto sec = TraceClock(t);
    so.nvme.on_io = [t, sec](IoOp op, const std::string& name, uint64_t bytes, auto start, auto end) {
      t->Add(op == IoOp::kRead ? Track::kNvmeRead : Track::kNvmeWrite, name, sec(start), sec(end), bytes);
    };
    // Only the compute thread's waits are exposed (it creates the engine and runs the steps):
    // the optimizer thread waiting for a buffer is the optimizer's time.
    so.on_wait = [t, sec, compute = std::this_thread::get_id()](const std::string& what, auto start, auto end) {
      t->Add(std::this_thread::get_id() == compute ? Track::kWait : Track::kOptimizer, "wait " + what, sec(start),
             sec(end), 0);
    };
  }
  STRATA_ASSIGN_OR_RETURN(state.store, TieredStore::Create(so));
  return Status();
}

// Note [Building blocks]
// Creation writes every block's initial state: working weights and fp32 master (6-8 B/param).
// Adam's moments are zero then, and a tensor never written is known zero to the store (Note
// [Known zero]), so they are registered, not written: 8 of the 14 B/param with fp32 moments.
// Made one block at a time into fresh tensors and written synchronously it ran at ~0.7 GB/s
// against ~5 GB/s for `bench io` writes. So:
//   * staging sets (the block's fp32 flat group and its working copy), sized for the largest
//     block and reused by every block, so their pages are faulted once; page-aligned, so that
//     the store writes straight from them (Note [Pools alongside the blocks] for the order of
//     the faults);
//   * MakeBlock initialises the block in place in its staging flat (no fresh parameters, no
//     flatten copy) on helper threads, plan.creation_draws blocks at once, with FillNormal
//     (strata/normal.h: LibTorch's normal_, serial mt19937 at ~0.27 G values/s, bound the
//     start-up), while block b's working copy is converted, hashed and its writes submitted;
//   * writes are asynchronous; a staging set is reused only once its block's writes completed,
//     and every write is waited for before the staging goes (also on an error); the next draw
//     is launched after block b's writes are submitted, so that block b-1's stay in flight;
//   * the gradient accumulators are reserved, not faulted (the first backward touches them);
//     optimizer states kept in host memory (strata.host_blocks, offload_optimizer "cpu") are
//     not page-locked: mlock faulted every page of them at registration, zero moments too,
//     and creation of the 3 B model with 12 host blocks took 22-26 s instead of 12 s.
// The 3 B model of issue 16 (17.9 GB written, `bench io` writes 2.9 GB/s here): 17-26 s before,
// 10-13 s after (cold memory the slower), the disk busy at 2-3 GB/s from the second second.
// Host memory: (draws + 1) x (4 + working dtype) B x the largest padded block
// (MemoryEstimate::creation).
struct Engine::Impl::Staging {
  torch::Tensor flat;          // fp32 [max padded]: the block's parameters, in flat order
  torch::Tensor working;       // compute dtype [max working range] (unused in fp32)
  // QLoRA: the block's NF4 blobs by slot index, until its working range is stored.
  WorkingFormat::Blobs nf4_blobs;
  std::vector<Event> writes;  // in flight from this set
  Status WaitWrites() {
    Status first;
    for (Event& t : writes)
      if (Status s = t.Wait(); !s.ok() && first.ok()) first = s;
    writes.clear();
    return first;
  }
};

Status Engine::Impl::BuildBlocks(const EngineHooks& hooks, const std::function<void(const std::string&)>& phase,
                                 const std::function<void()>& staged) {
  model.blocks.resize(plan.blocks.size());
  const int n = num_blocks();
  int64_t max_working = 0;
  for (const BlockPlan& bp : plan.blocks) max_working = std::max(max_working, bp.working.len);
  // Block b uses set b % sets; blocks b+1..b+draws-1 are drawn while b is converted and
  // hashed, and its writes and block b-1's are in flight.
  const int draws = plan.creation_draws, sets = draws + 1;
  // Page-aligned, so that the store writes straight from it (O_DIRECT); LibTorch's 64-byte
  // alignment sent every write through the NVMe tier's few bounce buffers (a copy, and at
  // most 8 requests in flight). Faulted by the first draws into it, on their threads, rather
  // than here before any block is made (cold, 1.2 GB took 9 s here).
  HostArrays memory;
  std::vector<Staging> staging(sets);
  for (Staging& s : staging) {
    STRATA_ASSIGN_OR_RETURN(std::byte * flat, memory.Reserve(plan.staging_numel() * sizeof(float)));
    std::byte* working = nullptr;
    if (compute_scalar() != torch::kFloat32) {
      STRATA_ASSIGN_OR_RETURN(working, memory.Reserve(max_working * torch::elementSize(compute_scalar())));
    }
    STRATA_RETURN_IF_ERROR(TorchCall("creation staging", [&] {
      s.flat = torch::from_blob(flat, {plan.staging_numel()}, torch::kFloat32);
      if (working) s.working = torch::from_blob(working, {max_working}, compute_scalar());
    }));
  }
  // Every write is done before the staging is freed, whichever way this function returns.
  struct Drain {
    std::vector<Staging>* sets;
    ~Drain() {
      for (Staging& s : *sets) (void)s.WaitWrites();
    }
  } drain{&staging};
  using Made = std::pair<Status, std::shared_ptr<model::Block>>;
  // Declared after the staging: on an early return the draws finish before it goes.
  std::deque<std::future<Made>> drawing;
  int launched = 0;
  auto launch = [&]() -> Status {  // the set is free once the block before in it is written
    Staging& set = staging[launched % sets];
    STRATA_RETURN_IF_ERROR(set.WaitWrites());
    drawing.push_back(std::async(std::launch::async, [this, b = launched, storage = set.flat] {
      std::shared_ptr<model::Block> block;
      Status s = TorchCall("model", [&] { block = model::MakeBlock(*model.spec, b, storage); });
      return Made(s, block);
    }));
    ++launched;
    return Status();
  };
  while (launched < std::min(draws, n)) STRATA_RETURN_IF_ERROR(launch());
  for (int b = 0; b < n; ++b) {
    phase(fmt::format("building block {} of {} (initial weights and optimizer states, written to their tiers)", b + 1, n));
    auto [made, module] = drawing.front().get();
    drawing.pop_front();
    STRATA_RETURN_IF_ERROR(made);
    STRATA_RETURN_IF_ERROR(BuildBlock(b, std::move(module), hooks, staging[b % sets]));
    if (b == std::min(sets, n) - 1) staged();
    // Only now: the next draw takes block b-1's set, whose writes had block b's conversion and
    // hashing to finish in (waiting before them left one block's writes in flight at a time).
    if (launched < n) STRATA_RETURN_IF_ERROR(launch());
  }
  for (Staging& s : staging) STRATA_RETURN_IF_ERROR(s.WaitWrites());
  MarkNoDecay();
  if (plan.format.rule().per_tensor) MarkTensorGroups();
  if (plan.format.rule().whole_matrices) STRATA_RETURN_IF_ERROR(MarkMuonTensors());
  return Status();
}

// strata.no_decay: each block's flat ranges of the parameters AdamW does not decay, by their
// Hugging Face names, as transformers' Trainer groups them.
void Engine::Impl::MarkNoDecay() {
  const NameMatcher no_decay(NoDecayPatterns(cfg));
  const bool gpt2 = cfg.model.arch == model::Arch::kGpt2;
  for (int b = 0; b < num_blocks(); ++b) {
    BlockRuntime& br = model.blocks[b];
    for (size_t i : br.by_offset) {
      const ParamSlot& s = br.slots[i];
      if (!no_decay.Matches(model::ToHfName(gpt2, static_cast<int>(cfg.model.n_layer), b, s.name).name)) continue;
      if (!br.no_decay.empty() && br.no_decay.back().second == s.offset) br.no_decay.back().second += s.numel;
      else br.no_decay.push_back({s.offset, s.offset + s.numel});
    }
  }
}

// LAMB: each block's tensors, grouped by the model parameter of transformers each is (part of),
// which its trust ratio is over (Note [LAMB trust ratio]).
void Engine::Impl::MarkTensorGroups() {
  std::vector<TensorGroups> all(num_blocks());
  for (int b = 0; b < num_blocks(); ++b) {
    const BlockRuntime& br = model.blocks[b];
    TensorGroups& g = all[b];
    std::vector<std::string> names;
    for (size_t i : br.by_offset) {
      const ParamSlot& s = br.slots[i];
      if (s.nf4 || s.numel == 0) continue;  // (an NF4 base is frozen)
      const std::string name = model::HfParameterOf(cfg.model, b, s.name);
      const auto at = std::find(names.begin(), names.end(), name);
      g.ranges.emplace_back(s.offset, s.offset + s.numel);
      g.group.push_back(static_cast<int>(at - names.begin()));
      if (at == names.end()) names.push_back(name);
    }
    g.count = static_cast<int>(names.size());
  }
  optimizer.window.SetTensorGroups(std::move(all));
}

// Muon: each block's tensors, those DeepSpeed's MuonWithAuxAdam gives Muon (at least two
// dimensions, a transformers name without "embed" or "lm_head") as matrices in transformers'
// shape (Note [Muon]). A matrix transformers fuses from several of Strata's tensors is refused.
Status Engine::Impl::MarkMuonTensors() {
  if (cfg.model.arch == model::Arch::kGpt2)
    return InvalidArgument("optimizer.type \"Muon\": not for GPT-2 yet (transformers holds its weights transposed)");
  std::vector<MuonTensors> all(num_blocks());
  for (int b = 0; b < num_blocks(); ++b) {
    const BlockRuntime& br = model.blocks[b];
    MuonTensors& t = all[b];
    std::vector<std::pair<std::string, bool>> seen;  // transformers' names so far, and whether Muon's
    for (size_t i : br.by_offset) {
      const ParamSlot& s = br.slots[i];
      if (s.nf4 || s.numel == 0) continue;
      const std::string name = model::HfParameterOf(cfg.model, b, s.name);
      std::string lower = name;
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const bool muon = s.shape.size() >= 2 && lower.find("embed") == std::string::npos &&
                        lower.find("lm_head") == std::string::npos;
      const auto at = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == name; });
      if (at != seen.end() && (muon || at->second))
        return InvalidArgument("optimizer.type \"Muon\": transformers holds {} as one matrix made of several of "
                               "Strata's tensors (block {}: {}), which is not supported yet", name, b, s.name);
      seen.emplace_back(name, muon);
      t.ranges.emplace_back(s.offset, s.offset + s.numel);
      if (!muon) {
        t.matrix.push_back(-1);
        continue;
      }
      const int64_t rows = s.shape[0], cols = s.numel / rows;  // (more than 2-D: viewed as rows x rest, as DeepSpeed)
      t.matrix.push_back(static_cast<int>(t.matrices.size()));
      t.matrices.push_back({s.offset, rows, cols, MuonLrRatio(cfg.muon.ns, rows, cols)});
    }
  }
  optimizer.window.SetMuonTensors(std::move(all));
  stats.ledger.Add(StateKind::kMuonUpdates, Tier::kCpu, optimizer.window.MuonBytes());
  return Status();
}

// Takes block b's module, made in place in `st.flat`: records its slots, applies the hook's
// weights, stores this rank's ranges and allocates its gradient accumulator.
Status Engine::Impl::BuildBlock(int b, std::shared_ptr<model::Block> module, const EngineHooks& hooks, Staging& st) {
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  const bool owner = model.tie && b == model.tie->owner_block;
  br.module = std::move(module);
  // As the model computes with them (with NF4 weights the group stores fewer elements).
  const int64_t block_numel = model.spec->block_parameters(b);
  const int64_t adapters_begin = cfg.model.lora.enabled() ? block_numel - model.spec->trainable_parameters(b) : 0;
  int64_t numel = 0;
  STRATA_RETURN_IF_ERROR(TorchCall("model", [&] {
    // Registration order; the offsets are where MakeBlock put them (adapters last).
    for (const auto& item : br.module->named_parameters(/*recurse=*/true)) {
      torch::Tensor p = item.value();
      const int64_t offset = p.data_ptr<float>() - st.flat.data_ptr<float>();
      const bool adapter = offset >= adapters_begin && adapters_begin > 0;
      STRATA_CHECK(offset >= 0 && offset + p.numel() <= block_numel && adapter == IsAdapterName(item.key()))
          << "block " << b << ": parameter " << item.key() << " lies at flat offset " << offset;
      const bool nf4 = model::StoredInNf4(cfg.model, b, item.key());
      br.slots.push_back({item.key(), p.sizes().vec(), offset, p.numel(), p.numel(), nf4});
      br.nf4 = br.nf4 || nf4;
      if (adapters_begin > 0 && !adapter) p.set_requires_grad(false);  // LoRA: the base is frozen
      br.params.push_back(p);
      if (owner && item.key() == model.tie->owner_param) br.tied_slot = static_cast<int>(br.slots.size() - 1);
      numel += p.numel();
    }
  }));
  STRATA_CHECK(numel == block_numel) << "block " << b << " has " << numel << " parameters, the model " << block_numel;
  STRATA_CHECK(br.nf4 || numel == bp.layout.numel) << "block " << b << " has " << numel << " parameters, the plan "
                                                   << bp.layout.numel;
  br.by_offset.resize(br.slots.size());
  std::iota(br.by_offset.begin(), br.by_offset.end(), size_t{0});
  std::sort(br.by_offset.begin(), br.by_offset.end(),
            [&](size_t x, size_t y) { return br.slots[x].offset < br.slots[y].offset; });
  if (hooks.init_weights) {  // the base's weights; adapters keep their initialisation
    NamedTensors named;
    for (size_t i = 0; i < br.params.size(); ++i)
      if (!IsAdapterName(br.slots[i].name)) named.push_back({br.slots[i].name, br.params[i].detach()});
    Status hs;
    STRATA_RETURN_IF_ERROR(TorchCall("init weights", [&] {
      torch::NoGradGuard no_grad;
      hs = hooks.init_weights(b, named);
    }));
    STRATA_RETURN_IF_ERROR(hs.WithContext(fmt::format("initial weights of block {}", b)));
  }
  if (owner && br.tied_slot < 0)
    return Status(StatusCode::kInternal, fmt::format("tied parameter '{}' not found in block {}", model.tie->owner_param, b));
  torch::Tensor flat;  // this block's flat group: its parameters, then zero padding
  st.nf4_blobs.clear();
  if (br.nf4) STRATA_RETURN_IF_ERROR(WorkingFormat::Pack(b, br, plan, st.flat, &st.nf4_blobs));  // the blobs apart
  STRATA_RETURN_IF_ERROR(TorchCall("flatten", [&] {
    flat = st.flat.narrow(0, 0, bp.layout.padded);
    flat.narrow(0, bp.layout.numel, bp.layout.padded - bp.layout.numel).zero_();
  }));
  STRATA_RETURN_IF_ERROR(StoreInitialState(b, flat, st));
  // Not faulted here: creation does not touch it, the first backward does, while it waits
  // for the disk (on this kind of VM faulting costs 0.5-2 s per GB, a 3 B model has 6-12 GB).
  STRATA_ASSIGN_OR_RETURN(br.grad, state.grads.Reserve(bp.grad.len * plan.gsize));
  stats.ledger.Add(StateKind::kGradAccum, Tier::kCpu, bp.grad.len * plan.gsize);
  // The module keeps no weights of its own: they are views of a gather buffer when it runs.
  for (auto& p : br.params) p.set_data(torch::empty({0}, torch::TensorOptions().dtype(compute_scalar())));
  return Status();
}

// Registers block b's tensors (plan.Keys() names) and submits the writes of their initial
// values: the working range in the compute dtype and the fp32 master weights (or their low
// halves); Adam's moments,
// zero, are only registered (Note [Building blocks]). The writes read `flat` and `st.working`
// until st.writes complete.
Status Engine::Impl::StoreInitialState(int b, const torch::Tensor& flat, Staging& st) {
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  // `init`: the initial bytes, or empty for a zero tensor (`bytes` long, known zero: not written).
  auto add = [&](const TensorKey& key, uint64_t bytes, std::span<const std::byte> init, TensorHandle* h) -> Status {
    const bool working = key.role == TensorRole::kWorking || key.role == TensorRole::kAdapter;
    const Tier home = key.role == TensorRole::kAdapter ? Tier::kCpu
                           : working                        ? plan.WorkingTier(b)
                                                            : plan.OptimizerTier(b);
    // Optimizer states: updated in place by the CPU Adam, never copied to a device.
    const HostPinning pinning = working ? HostPinning::kPageLocked : HostPinning::kPageable;
    // A sparse layer's working weights on NVMe: an extent per part (Note [Expert-aware fetching]).
    std::vector<uint64_t> parts;
    if (key.role == TensorRole::kWorking && home == Tier::kNvme)
      for (const WorkingPart& p : PartsOfWorking(plan, b)) parts.push_back(static_cast<uint64_t>(p.begin) * plan.dsize);
    STRATA_ASSIGN_OR_RETURN(*h, state.store->Register(key.Name(), bytes, StoreTierOf(home), pinning, std::move(parts)));
    if (!init.empty()) st.writes.push_back(state.store->Write(*h, init));
    const StateKind kind = working                              ? StateKind::kWorking
                           : key.role == TensorRole::kMaster ? StateKind::kMaster
                           : key.role == TensorRole::kAdamM  ? StateKind::kAdamM
                                                              : StateKind::kAdamV;
    stats.ledger.Add(kind, home, bytes);
    return Status();
  };
  torch::Tensor working;  // fp32: a view of the flat group; else converted into the staging
  const StateFormat& format = plan.format;
  STRATA_RETURN_IF_ERROR(TorchCall("initial state", [&] {
    working = flat.narrow(0, bp.working.begin, bp.working.len);
    torch::Tensor converted = compute_scalar() == torch::kFloat32 ? working : st.working.narrow(0, 0, bp.working.len);
    // The format may keep the working range's values as it stores them (a split master: the
    // working weights and, over the values themselves, the low halves); else they are converted.
    if (format.SplitInPlace(working.data_ptr<float>(), bp.working.len, static_cast<uint16_t*>(converted.data_ptr())))
      working = converted;
    else if (compute_scalar() != torch::kFloat32)
      working = converted.copy_(working);
  }));
  WorkingFormat::Place(b, br, plan, st.nf4_blobs, working);
  if (plan.resident[b]) {  // its home is the device: no store tensor
    bufs.resident.resize(plan.blocks.size());
    bufs.resident_ready.resize(plan.blocks.size());
    STRATA_RETURN_IF_ERROR(TorchCall("resident weights", [&] {
      bufs.resident[b] = torch::empty({bp.working.len}, torch::TensorOptions().device(io.dev->device()).dtype(compute_scalar()));
    }));
    STRATA_RETURN_IF_ERROR(io.dev->CopyIn(bufs.resident[b], working.data_ptr(), {}).Wait());
    stats.ledger.Add(StateKind::kWorking, Tier::kDevice, BytesOf(working).size());
  } else {  // with an adapter range (LoRA, base on NVMe) the working range's end goes apart
    const auto bytes = BytesOf(working);
    const size_t frozen = bp.working_tensor_len() * plan.dsize;
    STRATA_RETURN_IF_ERROR(add({b, TensorRole::kWorking, 0}, frozen, bytes.subspan(0, frozen), &br.working));
    if (bp.adapter.len > 0)
      STRATA_RETURN_IF_ERROR(add({b, TensorRole::kAdapter, 0}, bytes.size() - frozen, bytes.subspan(frozen), &br.adapter));
  }
  for (int64_t i = 0; i < bp.num_sub_groups(); ++i) {
    const ElementRange r = bp.sub_group(i);
    SubGroup sg{r, {}, {}, {}};
    // The master as the format stores it (none where the working weights hold it).
    if (format.MasterStored()) {
      const std::span<const std::byte> master = format.InitialMaster(flat.data_ptr<float>(), bp.working, r);
      STRATA_RETURN_IF_ERROR(add({b, TensorRole::kMaster, r.begin}, master.size(), master, &sg.master));
    }
    // The moments its optimizer keeps (Note [Optimizer rules]), zero: not written.
    for (TensorRole role : {TensorRole::kAdamM, TensorRole::kAdamV})
      if (format.Stores(role))
        STRATA_RETURN_IF_ERROR(add({b, role, r.begin}, format.StoredBytes(role, r.len), {}, &sg.of(role)));
    br.subs.push_back(sg);
  }
  return Status();
}

Status Engine::Impl::AllocateDeviceBuffers() {
  const auto on = torch::TensorOptions().device(io.dev->device());
  // Pinned through the device's pinner like every page-locked byte (counted in the run's
  // page-locked figure; cudaHostRegister on a GPU, as the store's cpu tier).
  const auto host = torch::TensorOptions().dtype(torch::kFloat32);
  std::shared_ptr<HostPinner> pinner = io.dev->is_host() ? nullptr : io.dev->MakeHostPinner();
  const int64_t shard_in = io.dev->is_host() ? 0 : plan.max_shard;
  auto slot = [&](int64_t padded, GatherSlot* g) {
    g->full = torch::empty({padded}, on.dtype(compute_scalar()));
    g->shard_in = torch::empty({shard_in}, on.dtype(compute_scalar()));
    stats.ledger.Add(StateKind::kGatherBuffers, Tier::kDevice, padded * g->full.element_size());
  };
  STRATA_RETURN_IF_ERROR(TorchCall("device buffers", [&] {
    bufs.gather.resize(plan.gather_slots);
    for (GatherSlot& g : bufs.gather) slot(plan.max_padded, &g);
    if (plan.tied_slot) slot(plan.blocks[plan.tied_owner].layout.padded, &bufs.tied);
    bufs.grads.resize(plan.grad_slots);
    for (GradSlot& g : bufs.grads) {
      g.flat = torch::zeros({plan.max_grad_flat}, on.dtype(torch::kFloat32));
      g.reduced = torch::zeros({plan.max_grad_reduced}, on.dtype(torch::kFloat32));
      if (!io.dev->is_host()) {
        g.host = torch::empty({plan.lora ? plan.max_grad_flat : plan.grads_sharded ? plan.max_shard : plan.max_padded}, host);
        g.host_pin = PinnedRange(pinner, g.host.data_ptr(), g.host.nbytes());
        if (!g.host_pin.pinned())
          LogWarn("the gradients' host copies stay pageable (slower copies): {}", g.host_pin.refusal().message());
      }
    }
    if (model.tie) bufs.pending_tied = torch::zeros({plan.tied_numel}, on.dtype(torch::kFloat32));
    if (plan.device_accum) {
      bufs.accum_read.resize(plan.blocks.size());
      for (const BlockPlan& bp : plan.blocks) {
        bufs.accum.push_back(torch::empty({bp.grad.len}, on.dtype(torch::kFloat32)));
        stats.ledger.Add(StateKind::kGradAccum, Tier::kDevice, bp.grad.len * 4);
      }
    }
  }));
  STRATA_RETURN_IF_ERROR(working_format.Allocate(plan, io.dev->device(), compute_scalar(), &stats.ledger));
  PinHostAccumulators(pinner);
  return Status();
}

// Note [Sums straight into the accumulators]: with device accumulation and fp32 host
// accumulators, each block's sum is copied from the device straight into its host
// accumulator, which is page-locked for that, instead of into a gradient slot the host then
// copies from. On the H200 the copy and the block's sum of squares after it (each at memory
// speed, ~30 ms per 0.8 GB block on one host thread) paced the last micro-batch's backward:
// the compute thread waited for a slot before each block's copy, ~1 s of a 6.5 s 7 B step
// with the GPU idle. The bytes are the same (the host copy was a plain fp32 copy: scale 1,
// first micro-batch); a block whose accumulator cannot be pinned keeps the slot.
void Engine::Impl::PinHostAccumulators(const std::shared_ptr<HostPinner>& pinner) {
  if (!pinner || !plan.device_accum || plan.gsize != 4) return;
  bufs.accum_host_pins.resize(plan.blocks.size());
  int refused = 0;
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    const uint64_t bytes = plan.blocks[b].grad.len * plan.gsize;
    if (bytes == 0) continue;
    bufs.accum_host_pins[b] = PinnedRange(pinner, model.blocks[b].grad, bytes);
    if (!bufs.accum_host_pins[b].pinned() && refused++ == 0)
      LogWarn("block {}'s gradient accumulator stays pageable (its sum goes through a gradient slot): {}", b,
              bufs.accum_host_pins[b].refusal().message());
  }
}

}  // namespace strata
