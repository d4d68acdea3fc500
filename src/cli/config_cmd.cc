// `strata config check FILE`: parses a ds_config.json the way `train` does, prints the
// resolved configuration (what every "auto" became and why) and the warnings, and exits
// non-zero on any error, without training.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "src/checkpoint/checkpoint.h"
#include "src/cli/commands.h"
#include "src/cli/train_config_cli.h"
#include "strata/log.h"

namespace strata::cli {
namespace {

struct ConfigArgs {
  std::string file, strata_file;
  std::vector<std::string> sets;
  int nproc = 1;
};

const char* ScheduleName(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kWarmupLR: return "WarmupLR";
    case LrScheduleKind::kWarmupDecayLR: return "WarmupDecayLR";
    case LrScheduleKind::kWarmupCosineLR: return "WarmupCosineLR";
    case LrScheduleKind::kOneCycle: return "OneCycle";
    case LrScheduleKind::kLRRangeTest: return "LRRangeTest";
  }
  return "?";
}

nlohmann::ordered_json Offload(const OffloadConfig& o) {
  return {{"device", OffloadDeviceName(o.device)}, {"nvme_path", o.nvme_path}, {"pin_memory", o.pin_memory},
          {"buffer_count", o.buffer_count}};
}

// The resolved scheduler parameters of the schedule's kind.
nlohmann::ordered_json ScheduleParams(const TrainConfig& c) {
  const ScheduleConfig& s = c.schedule;
  // WarmupLR's default peak is each group's own lr: Muon's two halves have one each.
  const nlohmann::ordered_json peak = s.warmup_max_is_group_lr && c.optimizer == OptimizerKind::kMuon
                                          ? nlohmann::ordered_json{c.muon.lr, c.lr}
                                          : nlohmann::ordered_json(s.warmup_max_lr);
  switch (s.kind) {
    case LrScheduleKind::kOneCycle:
      return {{"cycle_min_lr", s.cycle_min_lr}, {"cycle_max_lr", s.cycle_max_lr}, {"decay_lr_rate", s.decay_lr_rate},
              {"cycle_first_step_size", s.cycle_first_step_size}, {"cycle_second_step_size", s.cycle_second_step_size},
              {"cycle_first_stair_count", s.cycle_first_stair_count},
              {"cycle_second_stair_count", s.cycle_second_stair_count}, {"decay_step_size", s.decay_step_size},
              {"cycle_momentum", s.cycle_momentum}, {"cycle_min_mom", s.cycle_min_mom},
              {"cycle_max_mom", s.cycle_max_mom}, {"decay_mom_rate", s.decay_mom_rate}};
    case LrScheduleKind::kLRRangeTest:
      return {{"lr_range_test_min_lr", s.range_min_lr}, {"lr_range_test_step_size", s.range_step_size},
              {"lr_range_test_step_rate", s.range_step_rate}, {"lr_range_test_staircase", s.range_staircase}};
    default:
      return {{"warmup_min_lr", s.warmup_min_lr}, {"warmup_max_lr", peak},
              {"warmup_num_steps", s.warmup_num_steps},
              {"warmup_type", s.warmup_type == WarmupType::kLog ? "log" : "linear"}, {"total_num_steps", s.total_num_steps},
              {"cos_min_ratio", s.cos_min_ratio}, {"warmup_min_ratio", s.warmup_min_ratio}};
  }
}

// The optimizer section as Strata will run it: its type and the parameters that type has.
nlohmann::ordered_json ResolvedOptimizer(const TrainConfig& c) {
  switch (c.optimizer) {
    case OptimizerKind::kLion:
      return {{"type", "Lion"},
              {"params", {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"weight_decay", c.weight_decay}}}};
    case OptimizerKind::kAdagrad:
      return {{"type", "Adagrad"}, {"params", {{"lr", c.lr}, {"eps", c.eps}, {"weight_decay", c.weight_decay}}}};
    case OptimizerKind::kLamb:
      return {{"type", "Lamb"},
              {"params",
               {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"eps", c.eps}, {"eps_inside_sqrt", c.eps_inside_sqrt},
                {"weight_decay", c.weight_decay}, {"bias_correction", c.bias_correction},
                {"max_coeff", c.lamb_max_coeff}, {"min_coeff", c.lamb_min_coeff}}}};
    case OptimizerKind::kMuon: {
      const char* ns = c.muon.ns == MuonNs::kGram ? "gram" : c.muon.ns == MuonNs::kStandard ? "standard" : "torch";
      return {{"type", "Muon"},
              {"params",
               {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"eps", c.eps}, {"weight_decay", c.weight_decay},
                {"adam_w_mode", c.adam_w_mode}, {"muon_lr", c.muon.lr}, {"momentum", c.muon.momentum},
                {"muon_weight_decay", c.weight_decay}, {"ns_method", ns}}}};
    }
    case OptimizerKind::kAdam: break;
  }
  return {{"type", c.adam_w_mode ? "AdamW" : "Adam"},
          {"params",
           {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"eps", c.eps}, {"weight_decay", c.weight_decay},
            {"bias_correction", c.bias_correction}}}};
}

// The configuration as Strata will run it, in ds_config shape.
// strata.objective as the run takes it (Note [DPO]).
nlohmann::ordered_json ResolvedObjective(const TrainConfig& c) {
  if (c.objective != Objective::kDpo) return {{"type", "language_model"}};
  return {{"type", "dpo"},
          {"beta", c.dpo.beta},
          {"loss_type", c.dpo.loss == model::DpoLossType::kRobust ? "robust" : "sigmoid"},
          {"label_smoothing", c.dpo.label_smoothing}};
}

nlohmann::ordered_json Resolved(const TrainConfig& c) {
  const auto& s = c.schedule;
  return {
      {"train_batch_size", c.train_batch * c.tensor_parallel},  // as DeepSpeed counts it (TrainConfig::tensor_parallel)
      {"train_micro_batch_size_per_gpu", c.micro_batch},
      {"gradient_accumulation_steps", c.grad_accum},
      {"sequence_parallel_size", c.sequence_parallel},
      {"tensor_parallel", {{"autotp_size", c.tensor_parallel}}},
      {"gradient_clipping", c.gradient_clipping},
      {"bf16", {{"enabled", c.compute_dtype == DType::kBF16}}},
      {"fp16",
       {{"enabled", c.compute_dtype == DType::kF16}, {"loss_scale", c.loss_scale.static_scale},
        {"initial_scale_power", c.loss_scale.initial_scale_power}, {"loss_scale_window", c.loss_scale.window},
        {"hysteresis", c.loss_scale.hysteresis}, {"min_loss_scale", c.loss_scale.min_scale}}},
      {"optimizer", ResolvedOptimizer(c)},
      {"scheduler", {{"type", ScheduleName(s.kind)}, {"params", ScheduleParams(c)}}},
      {"zero_optimization",
       {{"stage", c.zero_stage}, {"offload_param", Offload(c.offload_param)},
        {"offload_optimizer", Offload(c.offload_optimizer)}, {"sub_group_size", c.sub_group_size},
        {"stage3_prefetch_bucket_size", c.prefetch_bucket_size}}},
      {"aio",
       {{"block_size", c.aio.block_size}, {"queue_depth", c.aio.queue_depth}}},
      {"steps_per_print", c.steps_per_print},
      {"wall_clock_breakdown", c.wall_clock_breakdown},
      {"strata",
       {{"steps", c.steps}, {"seed", c.seed}, {"eval_interval", c.eval_interval}, {"eval_batches", c.eval_batches},
        {"verify_checksums", c.verify_checksums}, {"save_interval", c.save_interval},
        {"keep_checkpoints", c.keep_checkpoints}, {"comm_timeout_s", c.comm_timeout_s}, {"device", c.device}, {"model", ckpt::ModelConfigJson(c.model)},
        {"data", DataConfigJson(c.data)}, {"objective", ResolvedObjective(c)}}}};
}

int RunCheck(const ConfigArgs& a) {
  auto run = ReadSettledConfig(a.file, a.strata_file, a.sets, a.nproc);
  if (!run.ok()) {
    std::fprintf(stderr, "error: %s\n", run.status().message().c_str());
    return 1;
  }
  const TrainConfig* cfg = &**run;
  std::printf("%s: OK for %d rank(s)\n\nresolved configuration:\n%s\n", a.file.c_str(), a.nproc,
              Resolved(*cfg).dump(2).c_str());
  std::printf("\n\"auto\" and derived values:\n");
  if (cfg->autos.empty()) std::printf("  (none)\n");
  for (const AutoValue& v : cfg->autos) std::printf("  %s = %s  (%s)\n", v.path.c_str(), v.value.c_str(), v.reason.c_str());
  std::printf("\ncompute dtype: %s (%s)\n", DTypeName(cfg->compute_dtype), cfg->precision_reason.c_str());
  if (!cfg->notes.empty()) std::printf("\nnotes:\n");
  for (const auto& n : cfg->notes) std::printf("  %s\n", n.c_str());
  std::printf("\nwarnings:\n");
  if (cfg->warnings.empty() && cfg->precision_warning.empty()) std::printf("  (none)\n");
  if (!cfg->precision_warning.empty()) std::printf("  warning: %s\n", cfg->precision_warning.c_str());
  for (const auto& w : cfg->warnings) std::printf("  warning: config key '%s' is not used by Strata; ignored\n", w.c_str());
  return 0;
}

}  // namespace

void AddConfigCommand(CLI::App& app, Action* action) {
  auto* config = app.add_subcommand("config", "configuration tools");
  config->require_subcommand(1);
  auto* check = config->add_subcommand("check", "print the resolved configuration, what each \"auto\" became, the "
                                                "warnings; exit 1 on any error (no training)");
  auto a = std::make_shared<ConfigArgs>();
  check->add_option("file", a->file, "ds_config.json")->required();
  check->add_option("--strata", a->strata_file, "a second JSON file holding the \"strata\" section");
  check->add_option("--set", a->sets, "override a config key: --set zero_optimization.stage=2");
  check->add_option("--nproc", a->nproc, "world size the batch keys are resolved for")->check(CLI::Range(1, 1 << 20));
  check->callback([=] { *action = [=] { return RunCheck(*a); }; });
}

}  // namespace strata::cli
