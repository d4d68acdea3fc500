#include "src/settle/settle.h"

#include <fmt/format.h>

#include <algorithm>

#include "src/engine/shard_plan.h"
#include "src/settle/settle_autos.h"
#include "src/settle/settle_keys.h"

namespace strata {

class RunConfigSettler {
 public:
  static RunConfig Make(SettledConfig c) { return RunConfig(std::move(c)); }
};

StatusOr<SettledRun> SettleRunConfig(TrainConfig written, const SettleContext& ctx) {
  SettledConfig c(std::move(written));
  // What the parser checked may have been changed since (--max-seq's lengths): the model's
  // arithmetic below needs a valid one.
  if (Status v = model::Validate(c.model); !v.ok()) return v.WithContext("strata.model");
  STRATA_ASSIGN_OR_RETURN(const int batch_ranks, CheckSequenceParallel(c, ctx.world));
  STRATA_ASSIGN_OR_RETURN(const int data_ranks, CheckTensorParallel(c, ctx.world));
  STRATA_RETURN_IF_ERROR(ResolveBatch(&c, batch_ranks));
  if (data_ranks != batch_ranks) {  // Note [Tensor parallel]: a tensor group reads one batch
    c.notes.push_back(fmt::format(
        "train_batch_size {} counts the tensor ranks, as DeepSpeed does; a tensor group of {} reads one micro-batch, "
        "so a step reads {} sequences (micro-batch x accumulation x {} data rank(s))",
        c.train_batch, c.tensor_parallel, c.micro_batch * c.grad_accum * data_ranks, data_ranks));
    c.train_batch = c.micro_batch * c.grad_accum * data_ranks;
  }
  ResolvePrecision(&c, ctx.on_gpu);
  ResolveSchedule(&c, ctx.device.host);
  ResolveTileSizes(&c);
  STRATA_RETURN_IF_ERROR(CheckObjective(c));
  MemoryEstimate estimate;
  bool host_blocks_auto = false;
  if (ctx.machine) {
    estimate = EstimateSettlingAutos(&c, ctx.world, ctx.params_override, ctx.device, *ctx.machine, ctx.local_ranks,
                                     &host_blocks_auto);
  } else {  // no machine to judge by: what is written, and the safe value of each "auto"
    c.accumulate_on_device = !ctx.device.host && c.grad_accum > 1 && c.device_accumulation == 1;
    c.keep_activations = c.recompute == Recompute::kNever;
    c.block_inputs_at = WrittenBlockInputs(c, ctx.device.host);
    host_blocks_auto = c.host_blocks < 0;
    c.host_blocks = std::max<int64_t>(c.host_blocks, 0);
  }
  const ShardPlan plan = ShardPlan::Make(c, ModelShape::Of(c.model, ctx.params_override), ctx.world, 0, ctx.device);
  STRATA_RETURN_IF_ERROR(plan.CheckFormats(c));
  if (c.data.epochs > 0 && ctx.epoch_windows > 0) {
    const int64_t epoch_steps = c.data.epochs * ctx.epoch_windows / c.train_batch;
    if (epoch_steps < 1)
      return InvalidArgument("strata.data.epochs {}: {} window(s) of {} tokens an epoch fill no batch of {}",
                             c.data.epochs, ctx.epoch_windows, c.model.seq_len + 1, c.train_batch);
    c.steps = std::min(c.steps, epoch_steps);
  }
  return SettledRun{RunConfigSettler::Make(std::move(c)), estimate, host_blocks_auto};
}

FitsAtLength SettledFitsAtLength(const TrainConfig& written, const SettleContext& context) {
  return [written, context](int64_t tokens, std::string* bound) -> std::optional<MemoryEstimate> {
    TrainConfig c = written;
    c.model.seq_len = tokens;
    auto settled = SettleRunConfig(std::move(c), context);
    if (!settled.ok()) {
      *bound = settled.status().message();
      return std::nullopt;
    }
    if (Status fits = CheckFits(settled->estimate, *context.machine, context.local_ranks); !fits.ok()) {
      *bound = fits.message();
      return std::nullopt;
    }
    return settled->estimate;
  };
}

}  // namespace strata
