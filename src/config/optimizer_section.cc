// optimizer and scheduler: what is trained with, as DeepSpeed 0.19.8 reads them (its defaults
// for absent keys, each noted) and the learning-rate schedules' parameters.
#include "src/config/optimizer_section.h"

#include <cctype>

namespace strata {
namespace {

constexpr int64_t kMaxSchedulerCount = int64_t{1} << 50;

// OneCycle's and LRRangeTest's parameters, with DeepSpeed 0.19.8's defaults and checks.
Status ParseCycleSchedule(JsonReader& p, ScheduleConfig* s) {
  if (s->kind == LrScheduleKind::kLRRangeTest) {
    STRATA_RETURN_IF_ERROR(p.Double("lr_range_test_min_lr", &s->range_min_lr, 0, 1e3));
    STRATA_RETURN_IF_ERROR(p.Int("lr_range_test_step_size", &s->range_step_size, 1, kMaxSchedulerCount));
    STRATA_RETURN_IF_ERROR(p.Double("lr_range_test_step_rate", &s->range_step_rate, 0, 1e9));
    return p.Bool("lr_range_test_staircase", &s->range_staircase);
  }
  for (const char* key : {"cycle_min_lr", "cycle_max_lr"})
    if (!p.Has(key)) return InvalidArgument("{}: required by OneCycle (DeepSpeed has no default)", p.PathOf(key));
  STRATA_RETURN_IF_ERROR(p.Double("cycle_min_lr", &s->cycle_min_lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("cycle_max_lr", &s->cycle_max_lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("decay_lr_rate", &s->decay_lr_rate, 0, 1e9));
  STRATA_RETURN_IF_ERROR(p.Double("cycle_first_step_size", &s->cycle_first_step_size, 1e-9, 1e15));
  s->cycle_second_step_size = s->cycle_first_step_size;
  STRATA_RETURN_IF_ERROR(p.Double("cycle_second_step_size", &s->cycle_second_step_size, 0, 1e15));
  STRATA_RETURN_IF_ERROR(p.Int("cycle_first_stair_count", &s->cycle_first_stair_count, 0, kMaxSchedulerCount));
  s->cycle_second_stair_count = s->cycle_first_stair_count;
  STRATA_RETURN_IF_ERROR(p.Int("cycle_second_stair_count", &s->cycle_second_stair_count, 0, kMaxSchedulerCount));
  STRATA_RETURN_IF_ERROR(p.Double("decay_step_size", &s->decay_step_size, 0, 1e15));
  STRATA_RETURN_IF_ERROR(p.Bool("cycle_momentum", &s->cycle_momentum));
  STRATA_RETURN_IF_ERROR(p.Double("cycle_min_mom", &s->cycle_min_mom, 0, 1));
  STRATA_RETURN_IF_ERROR(p.Double("cycle_max_mom", &s->cycle_max_mom, 0, 1));
  return p.Double("decay_mom_rate", &s->decay_mom_rate, -1e9, 1e9);
}

Status ParseBetas(JsonReader& p, TrainConfig* c) {
  if (p.IsAuto("betas")) {
    p.Touch("betas");
    c->autos.push_back({"optimizer.params.betas", fmt::format("[{}, {}]", c->beta1, c->beta2), "Strata's default"});
  } else if (p.Has("betas")) {
    const nlohmann::json* b = p.Raw("betas");
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
      return InvalidArgument("optimizer.params.betas: expected [beta1, beta2], got {}", b->dump());
    c->beta1 = (*b)[0].get<double>();
    c->beta2 = (*b)[1].get<double>();
    if (!(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1))
      return InvalidArgument("optimizer.params.betas: {} out of range [0, 1)", b->dump());
  }
  return Status();
}

}  // namespace

Status ParseScheduler(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader s, root.Child("scheduler"));
  if (!root.Has("scheduler")) return Status();
  std::string type = "WarmupLR";
  STRATA_RETURN_IF_ERROR(
      s.Choice("type", &type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}));
  c->schedule.kind = type == "WarmupLR"         ? LrScheduleKind::kWarmupLR
                     : type == "WarmupDecayLR"  ? LrScheduleKind::kWarmupDecayLR
                     : type == "OneCycle"       ? LrScheduleKind::kOneCycle
                     : type == "LRRangeTest"    ? LrScheduleKind::kLRRangeTest
                                                : LrScheduleKind::kWarmupCosineLR;
  STRATA_ASSIGN_OR_RETURN(JsonReader p, s.Child("params"));
  if (c->schedule.kind == LrScheduleKind::kOneCycle || c->schedule.kind == LrScheduleKind::kLRRangeTest) {
    STRATA_RETURN_IF_ERROR(ParseCycleSchedule(p, &c->schedule));
    p.Touch("last_batch_iteration");
    p.UnusedKeys(&c->warnings);
    s.UnusedKeys(&c->warnings);
    return Status();
  }
  // Absent, the peak is DeepSpeed's default: the optimizer's lr for WarmupLR, 0.001 for
  // WarmupDecayLR. "auto" is the optimizer's lr (what the Hugging Face Trainer fills in).
  c->schedule.warmup_max_lr = type == "WarmupDecayLR" && !p.IsAuto("warmup_max_lr") ? 1e-3 : c->lr;
  c->schedule.warmup_max_is_group_lr = type == "WarmupLR" && !p.Has("warmup_max_lr");
  // "auto" is the Trainer's warmup_steps, 0 unless set: no warmup (DeepSpeed's default is 1000).
  if (p.IsAuto("warmup_num_steps")) c->schedule.warmup_num_steps = 0;
  STRATA_RETURN_IF_ERROR(p.Double("warmup_min_lr", &c->schedule.warmup_min_lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("warmup_max_lr", &c->schedule.warmup_max_lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Int("warmup_num_steps", &c->schedule.warmup_num_steps, 0, kMaxSchedulerCount));
  std::string warmup = c->schedule.warmup_type == WarmupType::kLog ? "log" : "linear";
  STRATA_RETURN_IF_ERROR(p.Choice("warmup_type", &warmup, {"log", "linear"}));  // DeepSpeed warns and takes log
  c->schedule.warmup_type = warmup == "log" ? WarmupType::kLog : WarmupType::kLinear;
  STRATA_RETURN_IF_ERROR(p.Int("total_num_steps", &c->schedule.total_num_steps, 0, kMaxSchedulerCount));
  if (!p.Has("total_num_steps") && type != "WarmupLR")  // a difference kept on purpose: said
    c->notes.push_back(fmt::format("scheduler.params.total_num_steps: not set, so the run's steps (DeepSpeed 0.19.8's "
                                   "{} has no default and refuses to start)", type));
  STRATA_RETURN_IF_ERROR(p.Double("cos_min_ratio", &c->schedule.cos_min_ratio, 0, 1));
  STRATA_RETURN_IF_ERROR(p.Double("warmup_min_ratio", &c->schedule.warmup_min_ratio, 0, 1));
  p.Touch("last_batch_iteration");
  p.UnusedKeys(&c->warnings);
  s.UnusedKeys(&c->warnings);
  return Status();
}

namespace {

// What DeepSpeed 0.19.8 builds for an optimizer type Strata does not run, for the error.
std::string RefusedOptimizer(const std::string& lower) {
  if (lower == "onebitadam" || lower == "zerooneadam" || lower == "onebitlamb")
    return "compresses the gradients it communicates (DeepSpeed builds its 1-bit / 0/1 optimizer); Strata's "
           "communication is exact";
  return "is not an optimizer DeepSpeed 0.19.8 builds for ZeRO either";
}

// Lion and Adagrad: their parameters and the defaults of the classes DeepSpeed 0.19.8 builds
// (offloaded: DeepSpeedCPULion / DeepSpeedCPUAdagrad; else FusedLion / torch.optim.Adagrad,
// whose defaults are the same): Lion lr 1e-3, betas (0.9, 0.999), weight_decay 0; Adagrad lr
// 1e-2, eps 1e-10, weight_decay 0 (coupled, L2).
Status ParseOneStateOptimizer(JsonReader& opt, JsonReader& p, TrainConfig* c) {
  const bool lion = c->optimizer == OptimizerKind::kLion;
  c->lr = lion ? 1e-3 : 1e-2;
  c->beta1 = 0.9, c->beta2 = 0.999;
  c->eps = 1e-10;
  c->weight_decay = 0;
  c->bias_correction = false;
  if (!p.Has("weight_decay"))
    c->notes.push_back(fmt::format("optimizer.params.weight_decay: not set, so 0 (DeepSpeed 0.19.8 builds {})",
                                   lion ? "DeepSpeedCPULion or FusedLion" : "DeepSpeedCPUAdagrad or torch.optim.Adagrad"));
  STRATA_RETURN_IF_ERROR(p.Double("lr", &c->lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("weight_decay", &c->weight_decay, 0, 10));
  if (lion) {
    STRATA_RETURN_IF_ERROR(ParseBetas(p, c));
  } else {
    STRATA_RETURN_IF_ERROR(p.Double("eps", &c->eps, 1e-30, 1));
    // torch.optim.Adagrad's extras (DeepSpeedCPUAdagrad has none): only their no-op values.
    for (const char* key : {"lr_decay", "initial_accumulator_value"}) {
      double value = 0;
      STRATA_RETURN_IF_ERROR(p.Double(key, &value, 0, 1e9));
      if (value != 0)
        return InvalidArgument("{}: {} is not supported (DeepSpeedCPUAdagrad has no {}); leave it out or 0",
                               p.PathOf(key), value, key);
    }
    bool amsgrad = false;
    STRATA_RETURN_IF_ERROR(p.Bool("amsgrad", &amsgrad));
    if (amsgrad) return InvalidArgument("{}: Adagrad has no AMSGrad variant (DeepSpeed's ignores it)", p.PathOf("amsgrad"));
  }
  p.UnusedKeys(&c->warnings);
  opt.UnusedKeys(&c->warnings);
  return Status();
}

// LAMB: FusedLamb's parameters and defaults, the class DeepSpeed 0.19.8 builds for "Lamb"
// (lr 1e-3, bias_correction true, betas (0.9, 0.999), eps 1e-8 outside the root,
// weight_decay 0, the trust ratio clamped to [0.01, 10]). DeepSpeed asserts a dynamic loss
// scale for it: an fp16.loss_scale is refused as there.
Status ParseLamb(JsonReader& opt, JsonReader& p, TrainConfig* c) {
  c->lr = 1e-3;
  c->beta1 = 0.9, c->beta2 = 0.999;
  c->eps = 1e-8;
  c->weight_decay = 0;
  c->bias_correction = true;
  if (c->loss_scale.static_scale > 0)
    return InvalidArgument("fp16.loss_scale: {} is a static loss scale, and DeepSpeed 0.19.8 refuses \"Lamb\" without "
                           "a dynamic one (its FusedLamb); leave it out or 0", c->loss_scale.static_scale);
  if (!p.Has("weight_decay"))
    c->notes.push_back("optimizer.params.weight_decay: not set, so 0 (DeepSpeed 0.19.8 builds FusedLamb)");
  c->notes.push_back("optimizer.type Lamb: FusedLamb's update, its trust ratio over each whole parameter as "
                     "transformers holds it, across sub-groups and ranks (DeepSpeed 0.19.8 runs FusedLamb on the GPU "
                     "only, and under ZeRO only with zero_allow_untested_optimizer)");
  STRATA_RETURN_IF_ERROR(p.Double("lr", &c->lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(ParseBetas(p, c));
  STRATA_RETURN_IF_ERROR(p.Double("eps", &c->eps, 1e-30, 1));
  STRATA_RETURN_IF_ERROR(p.Bool("eps_inside_sqrt", &c->eps_inside_sqrt));
  STRATA_RETURN_IF_ERROR(p.Double("weight_decay", &c->weight_decay, 0, 10));
  STRATA_RETURN_IF_ERROR(p.Bool("bias_correction", &c->bias_correction));
  STRATA_RETURN_IF_ERROR(p.Double("max_coeff", &c->lamb_max_coeff, 0, 1e9));
  STRATA_RETURN_IF_ERROR(p.Double("min_coeff", &c->lamb_min_coeff, 0, 1e9));
  if (c->lamb_min_coeff > c->lamb_max_coeff)
    return InvalidArgument("{}: {} is above max_coeff {}", p.PathOf("min_coeff"), c->lamb_min_coeff, c->lamb_max_coeff);
  bool amsgrad = false;
  STRATA_RETURN_IF_ERROR(p.Bool("amsgrad", &amsgrad));
  if (amsgrad) return InvalidArgument("{}: FusedLamb has no AMSGrad variant (DeepSpeed 0.19.8 raises)", p.PathOf("amsgrad"));
  p.UnusedKeys(&c->warnings);
  opt.UnusedKeys(&c->warnings);
  return Status();
}

// Muon: DeepSpeed 0.19.8's MuonWithAuxAdam as its engine builds it (_muon_param_groups): the
// shared lr, weight_decay, the Muon half's momentum and ns_method, the AdamW half's betas and
// eps, muon_lr / adam_lr over the shared lr; the class's defaults for what is absent (Muon lr
// 0.02, momentum 0.95; AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-10; weight_decay 0).
Status ParseMuon(JsonReader& opt, JsonReader& p, TrainConfig* c) {
  c->lr = 3e-4;
  c->beta1 = 0.9, c->beta2 = 0.95;
  c->eps = 1e-10;
  c->weight_decay = 0;
  c->bias_correction = true;
  c->muon = MuonConfig();
  if (p.Has("lr")) {
    STRATA_RETURN_IF_ERROR(p.Double("lr", &c->lr, 0, 1e3));
    c->muon.lr = c->lr;
  }
  STRATA_RETURN_IF_ERROR(p.Double("muon_lr", &c->muon.lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("adam_lr", &c->lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(p.Double("momentum", &c->muon.momentum, 0, 0.999999));
  STRATA_RETURN_IF_ERROR(p.Double("weight_decay", &c->weight_decay, 0, 10));
  STRATA_RETURN_IF_ERROR(ParseBetas(p, c));
  STRATA_RETURN_IF_ERROR(p.Double("eps", &c->eps, 1e-30, 1));
  STRATA_RETURN_IF_ERROR(p.Bool("adam_w_mode", &c->adam_w_mode));
  std::string ns = "gram";
  STRATA_RETURN_IF_ERROR(p.Choice("ns_method", &ns, {"gram", "standard", "torch"}));
  c->muon.ns = ns == "gram" ? MuonNs::kGram : ns == "standard" ? MuonNs::kStandard : MuonNs::kTorch;
  bool per_head = false;
  STRATA_RETURN_IF_ERROR(p.Bool("per_head_muon", &per_head));
  if (per_head)
    return InvalidArgument("{}: true is not supported (each attention head orthogonalised on its own); leave it "
                           "out or false", p.PathOf("per_head_muon"));
  if (!p.Has("weight_decay"))
    c->notes.push_back("optimizer.params.weight_decay: not set, so 0 for both halves (DeepSpeed 0.19.8's "
                       "MuonWithAuxAdam)");
  c->notes.push_back(fmt::format(
      "optimizer.type Muon: DeepSpeed's MuonWithAuxAdam; every 2-D weight but the embeddings and lm_head takes Muon "
      "(lr {}, momentum {}, Newton-Schulz \"{}\" on the whole matrix, assembled across sub-groups and ranks), the "
      "rest AdamW (lr {}, betas [{}, {}], eps {})", c->muon.lr, c->muon.momentum, ns, c->lr, c->beta1, c->beta2, c->eps));
  p.UnusedKeys(&c->warnings);
  opt.UnusedKeys(&c->warnings);
  return Status();
}

}  // namespace

Status ParseOptimizer(JsonReader& root, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader opt, root.Child("optimizer"));
  if (!root.Has("optimizer")) return Status();
  std::string type = "AdamW";
  STRATA_RETURN_IF_ERROR(opt.String("type", &type));
  // DeepSpeed matches optimizer names in any case ("adamw", "ADAM").
  std::string lower = type;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower != "adam" && lower != "adamw" && lower != "lion" && lower != "adagrad" && lower != "lamb" && lower != "muon")
    return InvalidArgument("{}: \"{}\" {}; Strata runs \"Adam\", \"AdamW\", \"Lion\", \"Adagrad\", \"Lamb\" and "
                           "\"Muon\" (in any case)", opt.PathOf("type"), type, RefusedOptimizer(lower));
  STRATA_ASSIGN_OR_RETURN(JsonReader p, opt.Child("params"));
  if (p.Has("max_grad_norm"))  // as DeepSpeed 0.19.8, for every optimizer
    return InvalidArgument("{}: not an optimizer parameter (DeepSpeed 0.19.8 refuses it too); clip with the top-level "
                           "gradient_clipping", p.PathOf("max_grad_norm"));
  c->optimizer = lower == "lion"      ? OptimizerKind::kLion
                 : lower == "adagrad" ? OptimizerKind::kAdagrad
                 : lower == "lamb"    ? OptimizerKind::kLamb
                 : lower == "muon"    ? OptimizerKind::kMuon
                                      : OptimizerKind::kAdam;
  if (c->optimizer == OptimizerKind::kLamb) return ParseLamb(opt, p, c);
  if (c->optimizer == OptimizerKind::kMuon) return ParseMuon(opt, p, c);
  if (c->optimizer != OptimizerKind::kAdam) return ParseOneStateOptimizer(opt, p, c);
  type = lower == "adam" ? "Adam" : "AdamW";
  c->adam_w_mode = true;  // DeepSpeed's "Adam" is decoupled (AdamW) unless adam_w_mode is false
  STRATA_RETURN_IF_ERROR(p.Bool("adam_w_mode", &c->adam_w_mode));
  if (type == "AdamW") c->adam_w_mode = true;  // as DeepSpeed: its AdamW ignores adam_w_mode false
  // The class DeepSpeed 0.19.8 builds decides the defaults: DeepSpeedCPUAdam (offloaded) and
  // FusedAdam decay by 0; with torch_adam, torch.optim.AdamW (decoupled, "Adam" included) by
  // 0.01 and torch.optim.Adam by 0.
  bool torch_adam = false;
  STRATA_RETURN_IF_ERROR(p.Bool("torch_adam", &torch_adam));
  c->weight_decay = torch_adam && c->adam_w_mode ? 0.01 : 0.0;
  if (!p.Has("weight_decay"))
    c->notes.push_back(fmt::format("optimizer.params.weight_decay: not set, so {} (DeepSpeed 0.19.8 builds {})",
                                   c->weight_decay, !torch_adam ? "DeepSpeedCPUAdam or FusedAdam"
                                                    : c->adam_w_mode ? "torch.optim.AdamW" : "torch.optim.Adam"));
  STRATA_RETURN_IF_ERROR(p.Double("lr", &c->lr, 0, 1e3));
  STRATA_RETURN_IF_ERROR(ParseBetas(p, c));
  STRATA_RETURN_IF_ERROR(p.Double("eps", &c->eps, 0, 1));
  STRATA_RETURN_IF_ERROR(p.Double("weight_decay", &c->weight_decay, 0, 10));
  STRATA_RETURN_IF_ERROR(p.Bool("bias_correction", &c->bias_correction));
  p.UnusedKeys(&c->warnings);
  opt.UnusedKeys(&c->warnings);
  return Status();
}

}  // namespace strata
