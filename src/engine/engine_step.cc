// The step's compute half: one forward for training and eval (gather, run, keep the block
// inputs when training), the head's forward and backward, backward by recomputation, and
// the gradient collectives into the host accumulators. Engine::Step and Engine::EvalLoss.
#include <cmath>

#include "src/engine/engine_impl.h"
#include "src/engine/lr_schedule.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata {

// The blocks whose working weights one micro-batch reads, in order: forward 0..N-2, the
// head (after the tied owner), then, when training, backward N-2..0.
std::vector<int> Engine::Impl::VisitPlan(int micro_batches, bool backward) const {
  const int n = num_blocks();
  std::vector<int> order;
  for (int mb = 0; mb < micro_batches; ++mb) {
    for (int b = 0; b < n - 1; ++b) order.push_back(b);
    if (model.tie) order.push_back(model.tie->owner_block);
    order.push_back(n - 1);
    if (backward)
      for (int b = n - 2; b >= 0; --b) order.push_back(b);
  }
  return order;
}

// Null when working weights are not on NVMe (nothing to prefetch).
std::unique_ptr<PrefetchScheduler> Engine::Impl::MakePrefetcher(const std::vector<int>& order) {
  if (!pools.param) return nullptr;
  std::vector<PrefetchScheduler::Item> items;
  for (int b : order) items.push_back({b, model.blocks[b].working});
  const uint64_t budget = std::max<uint64_t>(1, cfg.prefetch_bucket_size * DTypeSize(cfg.compute_dtype));
  return std::make_unique<PrefetchScheduler>(std::move(items), store.get(), pools.param.get(), budget, tracer);
}

Status Engine::Impl::BatchToDevice(const data::Batch& batch, torch::Tensor* inputs, torch::Tensor* targets) const {
  return TorchCall("batch to the device", [&] {
    *inputs = batch.inputs.to(dev.device());
    *targets = batch.targets.to(dev.device());
  });
}

// Block b's full weights into gather[slot], its parameters bound to views of them.
Status Engine::Impl::Gather(int b, int slot, PrefetchScheduler* prefetch) {
  const BlockRuntime& br = model.blocks[b];
  const ShardLayout& layout = plan.blocks[b].layout;
  torch::Tensor full = bufs.gather[slot].narrow(0, 0, layout.padded);
  // The gather buffer may still be read by device work queued for the previous block.
  STRATA_RETURN_IF_ERROR(dev.WaitForCompute());
  if (!plan.weights_sharded) {
    STRATA_RETURN_IF_ERROR(dev.CopyIn(full, store->CpuMemory(br.working).data()));
  } else {
    PinnedBuffer lease;
    const std::byte* src;
    if (store->home(br.working) == Tier::kCpu) {
      src = store->CpuMemory(br.working).data();
    } else {
      STRATA_ASSIGN_OR_RETURN(lease, prefetch->Take(b));
      src = lease.data();
    }
    if (!dev.is_host()) {
      torch::Tensor shard = bufs.shard_in.narrow(0, 0, layout.shard);
      STRATA_RETURN_IF_ERROR(dev.CopyIn(shard, src));
      src = static_cast<const std::byte*>(shard.data_ptr());
    }
    Tracer::Span span(tracer, Track::kComm, "all-gather g" + std::to_string(b));
    STRATA_RETURN_IF_ERROR(dcomm()->AllGather(src, full.data_ptr(), layout.shard, cfg.compute_dtype));
  }
  Bind(b, slot);
  return Status();
}

void Engine::Impl::Bind(int b, int slot) {
  BlockRuntime& br = model.blocks[b];
  const torch::Tensor& full = bufs.gather[slot];
  for (size_t i = 0; i < br.params.size(); ++i) {
    const ParamSlot& s = br.slots[i];
    br.params[i].set_data(full.narrow(0, s.offset, s.numel).view(s.shape));
  }
}

// A tied head multiplies with the embedding's table, gathered into slot 1.
void Engine::Impl::BindTiedHead() {
  if (!model.tie) return;
  BlockRuntime& owner = model.blocks[model.tie->owner_block];
  model.blocks.back().module->BindTiedWeight(owner.params[owner.tied_slot]);
}

// Flattens block b's parameter gradients (plus the head's pending share of a tied weight),
// reduces them across ranks and adds this rank's range to its fp32 accumulator.
Status Engine::Impl::ReduceGradients(int b) {
  BlockRuntime& br = model.blocks[b];
  const BlockPlan& bp = plan.blocks[b];
  torch::Tensor flat = bufs.flat_grad.narrow(0, 0, bp.layout.padded);
  {
    Tracer::Span span(tracer, Track::kCompute, "flatten grads g" + std::to_string(b));
    flat.zero_();
    for (size_t i = 0; i < br.params.size(); ++i) {
      const torch::Tensor& grad = br.params[i].grad();
      if (grad.defined()) flat.narrow(0, br.slots[i].offset, br.slots[i].numel).copy_(grad.reshape(-1));
      br.params[i].mutable_grad().reset();
    }
    if (model.tie && b == model.tie->owner_block) {
      flat.narrow(0, br.slots[br.tied_slot].offset, bufs.pending_tied.numel()).add_(bufs.pending_tied);
      bufs.pending_tied.zero_();
    }
  }
  const double inv = 1.0 / (static_cast<double>(cfg.grad_accum) * comm->world_size());
  torch::Tensor acc = torch::from_blob(br.grad, {bp.grad.len}, torch::kFloat32);
  STRATA_RETURN_IF_ERROR(dev.WaitForCompute());  // the collective's stream reads `flat`
  torch::Tensor out;
  {
    Tracer::Span span(tracer, Track::kComm,
                      (plan.grads_sharded ? "reduce-scatter g" : "all-reduce g") + std::to_string(b));
    if (plan.grads_sharded) {
      out = bufs.reduced.narrow(0, 0, bp.layout.shard);
      STRATA_RETURN_IF_ERROR(
          dcomm()->ReduceScatter(flat.data_ptr(), out.data_ptr(), bp.layout.shard, DType::kF32, ReduceOp::kSum));
    } else {
      out = flat;
      STRATA_RETURN_IF_ERROR(dcomm()->AllReduce(flat.data_ptr(), bp.layout.padded, DType::kF32, ReduceOp::kSum));
    }
  }
  if (!dev.is_host()) {
    // The shard leaves the device as soon as its collective is done; the accumulation is
    // the host's (the CPU Adam reads it there).
    Tracer::Span span(tracer, Track::kWait, "gradients to host g" + std::to_string(b));
    torch::Tensor host = bufs.grad_host.narrow(0, 0, out.numel());
    STRATA_RETURN_IF_ERROR(dev.CopyOut(host.data_ptr(), out));
    out = host;
  }
  acc.add_(out, inv);
  return Status();
}

// The loss of one micro-batch (unscaled mean). Training (`act` non-null) keeps each block's
// input and backpropagates through the head: its gradients are reduced and the gradient of
// its input is left in act->grad_out for Backward(). Eval computes the loss only.
StatusOr<double> Engine::Impl::Forward(const data::Batch& batch, Pass pass, PrefetchScheduler* prefetch,
                                       Activations* act) {
  const int n = num_blocks();
  const bool train = pass == Pass::kTrain;
  STRATA_CHECK(!train || act) << "a training forward needs somewhere to keep its activations";
  torch::Tensor x, targets;
  STRATA_RETURN_IF_ERROR(BatchToDevice(batch, &x, &targets));
  if (train) act->inputs.assign(n, torch::Tensor());
  for (int b = 0; b < n - 1; ++b) {
    STRATA_RETURN_IF_ERROR(Gather(b, 0, prefetch));
    Tracer::Span span(tracer, Track::kCompute, (train ? "forward b" : "eval b") + std::to_string(b));
    STRATA_RETURN_IF_ERROR(TorchCall("forward", [&] {
      torch::NoGradGuard no_grad;
      if (train) act->inputs[b] = x;
      x = model.blocks[b].module->Forward(x);
    }));
  }
  if (model.tie) STRATA_RETURN_IF_ERROR(Gather(model.tie->owner_block, 1, prefetch));
  STRATA_RETURN_IF_ERROR(Gather(n - 1, 0, prefetch));
  double loss = 0;
  {
    Tracer::Span span(tracer, Track::kCompute, train ? "head fwd+bwd" : "eval head");
    STRATA_RETURN_IF_ERROR(TorchCall("head", [&] {
      BindTiedHead();
      model::Block& head = *model.blocks[n - 1].module;
      if (!train) {
        torch::NoGradGuard no_grad;
        loss = model::LanguageModelLoss(head.Forward(x), targets).item<double>();
        return;
      }
      act->inputs[n - 1] = x;
      torch::Tensor in = x.detach().requires_grad_(true);
      torch::Tensor l = model::LanguageModelLoss(head.Forward(in), targets);
      loss = l.item<double>();
      (l * scaler.scale()).backward();
      act->grad_out = in.grad();
      if (model.tie) {
        BlockRuntime& owner = model.blocks[model.tie->owner_block];
        torch::Tensor& w = owner.params[owner.tied_slot];
        if (w.grad().defined()) bufs.pending_tied.add_(w.grad().reshape(-1).to(torch::kFloat32));
        w.mutable_grad().reset();
      }
    }));
  }
  if (train) STRATA_RETURN_IF_ERROR(ReduceGradients(n - 1));
  return loss;
}

// Backward through blocks N-2..0 by recomputation from the kept inputs.
Status Engine::Impl::Backward(Activations& act, PrefetchScheduler* prefetch) {
  for (int b = num_blocks() - 2; b >= 0; --b) {
    STRATA_RETURN_IF_ERROR(Gather(b, 0, prefetch));
    {
      Tracer::Span span(tracer, Track::kCompute, "backward b" + std::to_string(b));
      STRATA_RETURN_IF_ERROR(TorchCall("backward", [&] {
        if (b == 0) {
          model.blocks[0].module->Forward(act.inputs[0]).backward(act.grad_out);
        } else {
          torch::Tensor in = act.inputs[b].detach().requires_grad_(true);
          model.blocks[b].module->Forward(in).backward(act.grad_out);
          act.grad_out = in.grad();
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
  m.DropEarlyStates();  // left by a step that failed before its optimizer ran

  std::unique_ptr<PrefetchScheduler> prefetch =
      m.MakePrefetcher(m.VisitPlan(static_cast<int>(m.cfg.grad_accum), /*backward=*/true));
  double loss_sum = 0;
  for (int64_t mb = 0; mb < m.cfg.grad_accum; ++mb) {
    const uint64_t index = static_cast<uint64_t>((step * m.cfg.grad_accum + mb) * world + rank);
    data::Batch batch = data.Get(data::Split::kTrain, index, m.cfg.micro_batch);
    if (mb + 1 == m.cfg.grad_accum) m.ReadFirstStatesEarly();  // hidden behind this micro-batch
    Activations act;
    StatusOr<double> loss = m.Forward(batch, Pass::kTrain, prefetch.get(), &act);
    Status s = loss.ok() ? m.Backward(act, prefetch.get()) : loss.status();
    if (!s.ok()) {
      if (prefetch) prefetch->Drain();
      m.DropEarlyStates();
      return s.WithContext(fmt::format("step {}", step));
    }
    loss_sum += *loss;
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
  const int world = m.comm->world_size(), rank = m.comm->rank();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    std::unique_ptr<PrefetchScheduler> prefetch = m.MakePrefetcher(m.VisitPlan(1, /*backward=*/false));
    data::Batch batch = data.Get(data::Split::kEval, static_cast<uint64_t>(i * world + rank), m.cfg.micro_batch);
    StatusOr<double> loss = m.Forward(batch, Pass::kEval, prefetch.get(), nullptr);
    if (!loss.ok()) {
      if (prefetch) prefetch->Drain();
      return loss.status().WithContext("eval");
    }
    sum += *loss;
  }
  float buf = static_cast<float>(sum);
  STRATA_RETURN_IF_ERROR(m.comm->AllReduce(&buf, 1, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(buf) / static_cast<double>(batches * world);
}

}  // namespace strata
