// The state as checkpoints and export see it: the fp32 master of a block, every tensor of
// this rank's shard visited and restored (with the master and the moments in the forms the
// StateFormat gives checkpoints), whatever the update is doing (it is waited for first).
#include <cstring>

#include "src/engine/engine_impl.h"
#include "strata/check.h"

namespace strata {

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
  if (m.plan.optim_sharded && m.io.comm->world_size() > 1) {
    torch::Tensor shard = full.narrow(0, layout.begin(), layout.shard).clone();
    STRATA_RETURN_IF_ERROR(m.io.comm->AllGather(shard.data_ptr(), full.data_ptr(), layout.shard, DType::kF32));
  }
  NamedTensors out;
  for (const ParamSlot& s : br.slots)  // an NF4 weight is frozen: no master, zero as the rest of the base
    out.push_back({s.name, s.nf4 ? torch::zeros(s.shape) : full.narrow(0, s.offset, s.numel).view(s.shape).clone()});
  return out;
}

Status Engine::VisitState(const std::function<Status(const TensorKey& key, std::span<const std::byte> bytes)>& visit) {
  Impl& m = *impl_;
  STRATA_RETURN_IF_ERROR(m.Quiesce());  // a checkpoint taken mid-overlap waits for the step to finish
  const StateFormat& format = m.plan.format;
  std::vector<std::byte> buf;
  auto one = [&](const TensorKey& key, TensorHandle h) -> Status {
    buf.resize(m.state.store->bytes(h));
    STRATA_RETURN_IF_ERROR(m.state.store->Read(h, buf).Wait());
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
      STRATA_RETURN_IF_ERROR(m.io.dev->CopyOut(buf.data(), t, {m.bufs.resident_ready[b]}).Wait());
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
      for (TensorRole r : {TensorRole::kAdamM, TensorRole::kAdamV})  // the moments its optimizer keeps
        if (format.Stores(r)) STRATA_RETURN_IF_ERROR(one({b, r, sg.range.begin}, sg.of(r)));
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
  if (m.state.restoring.block < 0) STRATA_RETURN_IF_ERROR(m.Quiesce());
  if (key.role == TensorRole::kWorking && key.block >= 0 && key.block < m.num_blocks() && m.plan.resident[key.block]) {
    const torch::Tensor& t = m.bufs.resident[key.block];
    if (bytes.size() != t.nbytes())
      return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(),
                   t.nbytes(), bytes.size());
    STRATA_RETURN_IF_ERROR(m.io.dev->Synchronize());  // nothing still reads the old weights
    m.bufs.resident_ready[key.block] = m.io.dev->CopyIn(t, bytes.data(), {});
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
        h = sg.of(key.role);
        sub = &sg;
        if (key.role != TensorRole::kMaster && !h->valid()) h.reset();  // a moment this run's optimizer keeps not
      }
  }
  if (!h) return Error(StatusCode::kNotFound, "no tensor '{}' in this run's state", key.Name());
  const StateFormat& format = m.plan.format;
  if (key.role == TensorRole::kWorking && format.MasterFromWorking() && bytes.size() == m.state.store->bytes(*h)) {
    if (m.state.restoring.block != key.block) STRATA_RETURN_IF_ERROR(m.FlushRestoringWorking());
    m.state.restoring.block = key.block;  // its masters, before or after, are patched into these
    m.state.restoring.bytes.assign(bytes.begin(), bytes.end());
    return Status();
  }
  if (key.role == TensorRole::kMaster && format.MasterFromWorking()) return m.RestoreMasterFromWorking(key, *sub, bytes);
  if (format.Converts(key.role)) {  // as checkpoints hold it, to what the store keeps (the blob VisitState read)
    if (bytes.size() != static_cast<size_t>(sub->range.len) * format.VisitedBytes(key.role))
      return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} fp32 values, the checkpoint holds {} bytes",
                   key.Name(), sub->range.len, bytes.size());
    return m.state.store->Write(*h, format.Restore(key.role, bytes, sub->range.len)).Wait();
  }
  if (bytes.size() != m.state.store->bytes(*h))
    return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(),
                 m.state.store->bytes(*h), bytes.size());
  return m.state.store->Write(*h, bytes).Wait();
}

StatusOr<std::vector<std::byte>> Engine::Impl::ReadWorking(int b) {
  const TensorHandle h = model.blocks[b].working;
  std::vector<std::byte> out(state.store->bytes(h));
  STRATA_RETURN_IF_ERROR(state.store->Read(h, out).Wait());
  return out;
}

Status Engine::Impl::ReadMaster(int b, const SubGroup& sg, std::span<const std::byte> working, std::span<std::byte> dst) {
  STRATA_CHECK(dst.size() == static_cast<size_t>(sg.range.len) * 4) << dst.size();
  const StateFormat& format = plan.format;
  std::vector<std::byte> stored(format.StoredBytes(TensorRole::kMaster, sg.range.len));
  if (!stored.empty()) STRATA_RETURN_IF_ERROR(state.store->Read(sg.master, stored).Wait());
  std::span<const std::byte> mine;  // the sub-group's part of the working weights, where they hold the master
  if (format.MasterFromWorking()) {
    const int64_t at = sg.range.begin - plan.blocks[b].working.begin;
    STRATA_CHECK(at >= 0 && (at + sg.range.len) * plan.dsize <= working.size()) << "block " << b;
    mine = working.subspan(at * plan.dsize, sg.range.len * plan.dsize);
  }
  format.ReadMaster(mine, stored, {reinterpret_cast<float*>(dst.data()), static_cast<size_t>(sg.range.len)});
  return Status();
}

Status Engine::Impl::RestoreMasterFromWorking(const TensorKey& key, const SubGroup& sg, std::span<const std::byte> fp32) {
  const int b = key.block;
  const int64_t len = sg.range.len;
  if (fp32.size() != static_cast<size_t>(len) * 4)
    return Error(StatusCode::kInvalidArgument, "tensor '{}' has {} bytes, the checkpoint holds {}", key.Name(), len * 4,
                 fp32.size());
  if (state.restoring.block != b) {
    STRATA_RETURN_IF_ERROR(FlushRestoringWorking());
    STRATA_ASSIGN_OR_RETURN(state.restoring.bytes, ReadWorking(b));
    state.restoring.block = b;
  }
  std::vector<std::byte>& working = state.restoring.bytes;
  const int64_t at = sg.range.begin - plan.blocks[b].working.begin;
  STRATA_CHECK(at >= 0 && (at + len) * plan.dsize <= working.size()) << "block " << b;
  const StateFormat& format = plan.format;
  std::vector<float> master(len);
  std::memcpy(master.data(), fp32.data(), fp32.size());
  std::vector<std::byte> stored(format.StoredBytes(TensorRole::kMaster, len));
  format.WriteMaster(master, std::span(working).subspan(at * plan.dsize, len * plan.dsize), stored);
  return stored.empty() ? Status() : state.store->Write(sg.master, stored).Wait();
}

Status Engine::Impl::FlushRestoringWorking() {
  if (state.restoring.block < 0) return Status();
  const int b = state.restoring.block;
  state.restoring.block = -1;
  const std::vector<std::byte> bytes = std::move(state.restoring.bytes);
  return state.store->Write(model.blocks[b].working, bytes).Wait();
}

}  // namespace strata
