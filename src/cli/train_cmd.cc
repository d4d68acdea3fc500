// `strata train`: the training loop around the Engine, on one rank of a launch (torchrun,
// Slurm, or `--nproc N`, which starts N local ranks itself). A TrainRun goes through its
// steps in order: Configure (config, threads), Connect (communicator, compute device, the fit
// check), CreateEngine (data, --init-from, the engine), Resume, Loop (steps, evaluations,
// checkpoints, the trace), Finish (final save and eval, the memory audit).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/ranges.h>

#include "src/checkpoint/checkpoint.h"
#include "src/config/decay_groups.h"
#include "src/base/durable_file.h"
#include "src/base/temporaries.h"
#include "src/hf/hf_loader.h"
#include "src/cli/commands.h"
#include "src/cli/default_config.h"
#include "src/cli/progress.h"
#include "src/cli/step_heartbeat.h"
#include "src/cli/startup_progress.h"
#include "src/cli/stop_on_signal.h"
#include "src/cli/train_config_cli.h"
#include "src/comm/launcher.h"
#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "src/config/train_config.h"
#include "src/estimate/estimator.h"
#include "src/settle/fit_advice.h"
#include "src/settle/settle_keys.h"
#include "src/estimate/host_blocks_fit.h"
#include "src/estimate/step_time.h"
#include "bench/machine_rates.h"
#include "src/model/model_family.h"
#include "src/settle/settle.h"
#include "src/cli/dpo_reference.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/shared_folder.h"
#include "strata/host_pinner.h"
#include "strata/log.h"

namespace strata::cli {
namespace {

struct TrainArgs {
  std::string config;  // "" = the built-in tiny config
  std::string strata_file;
  int64_t steps = -1;
  int64_t seed = -1;
  int nproc = 1;
  std::string trace;
  std::vector<std::string> sets;
  std::string save, resume, init_from, metrics;
  int64_t save_interval = -1;
  bool no_fit_check = false;
  bool memory_only = false;
  bool overwrite = false;  // --save may replace another run's checkpoints
  bool predict = false;    // the step-time model's prediction, beside the measured step at the end
};

// This process's resident memory (now and peak) from /proc/self/status, beside the ledger.
uint64_t ProcStatusBytes(const char* key) { return ProcKilobyteField("/proc/self/status", key); }

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class TrainRun {
 public:
  explicit TrainRun(const TrainArgs& a) : a_(a) {}
  int Run();

 private:
  Status Configure();
  Status Connect();
  Status ClaimSaveFolder();
  Status CreateEngine();
  Status Resume();
  void Predict();
  Status Loop();
  Status Finish();
  void PrintLedger() const;
  void PrintStartup();
  void ReportMemory();
  Status Eval(int64_t step);
  Status Save(int64_t step);
  bool lead() const { return env_.rank == 0; }
  // Where the initial weights come from: --init-from (a file or a folder), else strata.model.from.
  const std::string& init_from() const { return a_.init_from.empty() ? cfg_.model_from : a_.init_from; }
  int local_ranks() const { return std::max(1, a_.nproc > 1 ? a_.nproc : env_.world_size); }

  const TrainArgs& a_;
  LaunchEnv env_;
  std::string origin_;           // the config's files, for messages
  SettledConfig cfg_;            // as written (nothing settled), then (from Connect on) as settled: *run_
  std::optional<RunConfig> run_;  // settled for this run (Connect)
  MemoryEstimate estimate_;
  std::unique_ptr<Communicator> comm_, blocks_comm_;  // ZeRO's; the blocks' own with model-parallel groups
  OpenedDevice device_;
  std::unique_ptr<data::TokenDataset> data_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<monitor::Monitors> monitors_;  // lead rank: the tensorboard and csv_monitor sections'
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<StepHeartbeat> heartbeat_;  // lead rank: progress within a long step
  std::unique_ptr<FolderLock> save_lock_;  // rank 0's claim on --save
  TempPath unsaved_save_dir_;  // a --save folder this run created: removed unless a checkpoint lands in it
  ckpt::FolderGroups save_groups_;  // which ranks share a --save folder (ClaimSaveFolder)
  std::string dpo_reference_;        // DPO: the reference log-probabilities' file, kept in each checkpoint
  std::vector<std::string> replaced_;  // --overwrite: another run's step folders there, removed at the first save
  std::unique_ptr<StartupProgress> startup_;      // from the data to the first step
  uint64_t rss_before_engine_ = 0, file_before_engine_ = 0;
  double predicted_step_s_ = 0;  // --predict: the step-time model's, 0 = none
  std::string predicted_binding_;
  int64_t start_ = 0, last_saved_ = 0;
};

int TrainRun::Run() {
  for (Status (TrainRun::*step)() : {&TrainRun::Configure, &TrainRun::Connect, &TrainRun::CreateEngine}) {
    if (Status s = (this->*step)(); !s.ok()) {
      if (!s.message().empty()) LogError("{}", s.ToString());  // empty: another rank reports it
      return 1;
    }
  }
  if (a_.memory_only) return 0;
  for (Status (TrainRun::*step)() : {&TrainRun::Resume, &TrainRun::Loop, &TrainRun::Finish}) {
    if (Status s = (this->*step)(); !s.ok()) {
      LogError("{}", s.ToString());
      return 1;
    }
  }
  return 0;
}

// The config (with --steps/--seed/--save-interval as overrides), its warnings, and the cores
// shared between the local ranks.
Status TrainRun::Configure() {
  STRATA_ASSIGN_OR_RETURN(env_, LaunchEnv::FromEnvironment());
  std::vector<std::string> sets = a_.sets;
  if (a_.steps >= 0) sets.push_back(fmt::format("strata.steps={}", a_.steps));
  if (a_.seed >= 0) sets.push_back(fmt::format("strata.seed={}", a_.seed));
  if (a_.save_interval >= 0) sets.push_back(fmt::format("strata.save_interval={}", a_.save_interval));
  // --init-from DIR: the architecture comes from the folder's config.json, as strata.model.from.
  std::error_code ec;
  if (!a_.init_from.empty() && std::filesystem::is_directory(a_.init_from, ec))
    sets.push_back("strata.model.from=" + nlohmann::json(a_.init_from).dump());
  STRATA_ASSIGN_OR_RETURN(TrainConfig written, ReadTrainConfig(a_.config, a_.strata_file, sets, &origin_));
  cfg_ = SettledConfig(std::move(written));
  // Before any rank connects: every rank sees the same folder and stops; rank 0 says why.
  if (!a_.save.empty()) {
    StatusOr<std::vector<std::string>> replaced = ckpt::CheckSaveFolder(a_.save, a_.resume, a_.overwrite);
    if (!replaced.ok()) return lead() ? replaced.status() : Status(replaced.status().code(), "");
    replaced_ = std::move(replaced).value();
    if (lead() && !replaced_.empty())
      LogInfo("--overwrite: the {} step folder(s) another run left in '{}' are removed when this run's first "
              "checkpoint is in place", replaced_.size(), a_.save);
  }
  if (lead()) {
    for (const auto& w : cfg_.warnings) LogWarn("config key '{}' is not used by Strata; ignored", w);
    for (const auto& n : cfg_.notes) LogInfo("config: {}", n);
    // Before the engine's minutes of start-up: a monitor folder that cannot be written stops the run now.
    STRATA_ASSIGN_OR_RETURN(monitors_, monitor::Monitors::Open(cfg_));
  }
  // Share the cores between the local ranks: LibTorch's and OpenMP's pools alike.
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks());
  torch::set_num_threads(threads);
  omp_set_num_threads(threads);
  return Status();
}

Status TrainRun::Connect() {
  // A dead peer closes its sockets, a hung one meets the timeout: no rank waits forever. With
  // sequence or tensor parallelism a second ring, the blocks' own (Note [Process mesh]); one
  // rank: none.
  STRATA_ASSIGN_OR_RETURN(auto comms, MakeTcpCommunicators(env_, std::chrono::seconds(cfg_.comm_timeout_s),
                                                           cfg_.sequence_parallel * cfg_.tensor_parallel > 1 ? 2 : 1));
  comm_ = std::move(comms[0]);
  if (comms.size() == 2) blocks_comm_ = std::move(comms[1]);
  // Where blocks run; a GPU gets NCCL for its device buffers, met through the host communicator.
  auto device = OpenComputeDevice(cfg_.device, env_.local_rank, comm_.get());
  if (!device.ok()) return device.status().WithContext(fmt::format("rank {}", env_.rank));
  device_ = std::move(device).value();
  if (!a_.save.empty()) STRATA_RETURN_IF_ERROR(ClaimSaveFolder());  // before any step
  // The config settled for this run on this machine; refused before any state is allocated
  // when it cannot fit: host memory, NVMe, and a GPU's own memory.
  const MachineCapacity machine = ProbeMachine(cfg_, device_.device->MemoryBytes());
  // The data, read after the probe (its memory is the run's) and before settling: with
  // strata.data.epochs its size says how many steps the run has.
  startup_ = std::make_unique<StartupProgress>(lead(), "reading the token data");
  STRATA_ASSIGN_OR_RETURN(data_, data::TokenDataset::Open(cfg_.data, cfg_.model.vocab_size, cfg_.model.seq_len));
  const DeviceTraits traits{device_.device->is_host()};
  SettleContext context{env_.world_size, local_ranks(), SpecNamesGpu(cfg_.device), traits, &machine};
  context.epoch_windows = data_->epoch_windows();
  auto settled = SettleRunConfig(cfg_, context);
  if (!settled.ok()) return settled.status().WithContext(origin_);
  run_.emplace(settled->config);
  cfg_ = **run_;
  estimate_ = settled->estimate;
  const bool decays = cfg_.schedule.kind == LrScheduleKind::kWarmupDecayLR ||
                      cfg_.schedule.kind == LrScheduleKind::kWarmupCosineLR;
  if (lead() && cfg_.data.epochs > 0 && decays && cfg_.steps < cfg_.schedule.total_num_steps)
    LogWarn("strata.data.epochs {} ends the run after {} steps, before scheduler.params.total_num_steps {}: the "
            "learning rate will not have decayed to its end; set scheduler.params.total_num_steps to {} for a "
            "schedule that ends with the epochs", cfg_.data.epochs, cfg_.steps, cfg_.schedule.total_num_steps,
            cfg_.steps);
  if (lead() && !cfg_.precision_warning.empty()) LogWarn("{}", cfg_.precision_warning);
  if (settled->host_blocks_auto && lead() && cfg_.host_blocks > 0)
    LogInfo("strata.host_blocks auto: {} kept in host memory (host memory {} estimated, "
            "{} available), {}",
            HostBlocksPhrase(cfg_.host_blocks),
            HumanBytes(estimate_.node_host_bytes(local_ranks())), HumanBytes(machine.host_available),
            estimate_.node_nvme_bytes(local_ranks()) == 0 ? "nothing on NVMe" : "the rest on NVMe");
  if (Status fits = CheckFits(estimate_, machine, local_ranks()); !fits.ok() && !a_.no_fit_check)
    return Error(fits.code(), "{}{}", fits.message(),
                 FitAdvice(cfg_, env_.world_size, 0, traits, machine, local_ranks()));
  return Status();
}

// --predict: this machine measured (before the engine, so that nothing else runs beside the
// probes) and the step-time model's table for the settled config.
void TrainRun::Predict() {
  if (!device_.device->is_host()) {
    LogWarn("--predict measures blocks on this CPU; for a GPU use strata estimate --machine ({})", NominalMachineNames());
    return;
  }
  std::printf("measuring this machine for the step-time model (the engine on two layers, CPU Adam, memory, the "
              "NVMe tier where the config uses it)...\n");
  std::fflush(stdout);
  auto rates = bench::MeasureThisMachine(cfg_);
  if (!rates.ok()) {
    LogWarn("--predict: {}", rates.status().message());
    return;
  }
  const ShardPlan plan = ShardPlan::Make(cfg_, ModelShape::Of(cfg_.model), env_.world_size, env_.rank, {true});
  const StepTimePrediction p = PredictStepTime(cfg_, plan, *rates);
  predicted_step_s_ = p.step_s;
  predicted_binding_ = p.binding;
  std::printf("%s", FormatPrediction(p, *rates).c_str());
  std::fflush(stdout);
  // The probes' buffers are gone: the run's own peak resident memory starts from here
  // (clear_refs 5 resets VmHWM, what ReportMemory compares with the estimate).
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// --save is made by the first rank of each folder, in rank order (so its maker is the folder's
// lead: the lowest rank that sees it) and removed at exit unless a checkpoint lands in it; with
// one shared folder only rank 0 makes it. Which ranks share it is found (ckpt::FindFolderGroups)
// and checked against checkpoint.use_node_local_storage, and each folder's lead takes the
// run's claim on it: a second run on it stops here.
Status TrainRun::ClaimSaveFolder() {
  namespace fs = std::filesystem;
  const bool makes = env_.rank == 0 || cfg_.node_local_checkpoints;
  for (int r = 0; r < env_.world_size; ++r) {
    if (r == env_.rank && makes) {
      std::error_code ec;
      fs::path created;  // the topmost folder of --save that does not exist yet
      for (fs::path p = fs::path(a_.save).lexically_normal(); !p.empty() && !fs::exists(fs::symlink_status(p, ec));
           p = p.parent_path()) {
        created = p;
        if (p == p.parent_path()) break;
      }
      const auto hold = HoldOffStops();  // (a stop meanwhile: the folder is never made)
      if (!created.empty()) {
        fs::create_directories(a_.save, ec);
        if (ec) return Error(StatusCode::kIoError, "cannot create --save '{}': {}", a_.save, ec.message());
        unsaved_save_dir_ = TempPath(created.string());
      }
    }
    if (env_.world_size > 1) STRATA_RETURN_IF_ERROR(comm_->Barrier());
  }
  STRATA_ASSIGN_OR_RETURN(save_groups_, ckpt::FindFolderGroups(*comm_, a_.save));
  std::string note;
  STRATA_RETURN_IF_ERROR(
      ckpt::CheckFolderGroups(save_groups_, a_.save, "--save", cfg_.node_local_checkpoints, env_.rank, &note));
  if (lead() && !note.empty()) LogInfo("{}", note);
  if (!save_groups_.leads(env_.rank)) return Status();
  const auto hold = HoldOffStops();
  STRATA_ASSIGN_OR_RETURN(save_lock_, FolderLock::Take(a_.save));
  return Status();
}

Status TrainRun::CreateEngine() {
  if (a_.predict && lead()) Predict();
  EngineHooks hooks;
  if (!init_from().empty() && a_.resume.empty()) {
    auto w = ckpt::HfWeights::Open(init_from(), cfg_.model);
    if (!w.ok()) return w.status().WithContext(a_.init_from.empty() ? "strata.model.from" : "--init-from");
    hooks = ckpt::MakeInitFromHooks(*w, model::ModelSpec(cfg_.model).num_blocks());
  } else if (!init_from().empty() && lead()) {
    LogWarn("initial weights from {} ignored: --resume restores all weights", init_from());
  }
  hooks.on_phase = [p = startup_.get()](const std::string& what) { p->Phase("creating the engine: " + what); };
  hooks.blocks_world = blocks_comm_.get();
  tracer_ = std::make_unique<Tracer>(env_.rank);
  rss_before_engine_ = ProcStatusBytes("VmRSS:");
  file_before_engine_ = ProcStatusBytes("RssFile:");
  auto engine = Engine::Create(*run_, comm_.get(), tracer_.get(), std::move(hooks), device_.device.get());
  if (!engine.ok()) return engine.status().WithContext(fmt::format("rank {}", env_.rank));
  engine_ = std::move(engine).value();
  if (lead()) PrintLedger();
  return Status();
}

// What this rank allocated (the engine's ledger) beside what the estimator predicted.
void TrainRun::PrintLedger() const {
  const MemoryLedger& m = engine_->ledger();
  auto pair = [&](Tier r) {
    return fmt::format("{} (estimated {})", HumanBytes(m.Total(r)), HumanBytes(estimate_.ledger.Total(r)));
  };
  std::printf("memory per rank (the engine's ledger): device %s, cpu %s, nvme %s; swap files on disk %s (estimated "
              "%s); estimated peak host memory %s (see the measured figure at the end)\n",
              pair(Tier::kDevice).c_str(), pair(Tier::kCpu).c_str(), pair(Tier::kNvme).c_str(),
              HumanBytes(engine_->swap_bytes_on_disk()).c_str(), HumanBytes(estimate_.nvme_on_disk).c_str(),
              HumanBytes(estimate_.host_peak()).c_str());
  const CreationStats& c = engine_->creation();
  std::printf("engine created in %.1f s: initial state of %s written in %.1f s (%s/s; the optimizer's moments, %s, zero: "
              "not written); pools of %s pinned in %.1f s%s\n",
              c.total_s, HumanBytes(c.state_bytes).c_str(), c.blocks_s,
              HumanBytes(c.blocks_s > 0 ? static_cast<uint64_t>(c.state_bytes / c.blocks_s) : 0).c_str(),
              HumanBytes(c.zero_bytes).c_str(), HumanBytes(c.pool_bytes).c_str(), c.pools_s,
              device_.device->is_host() ? " alongside" : "");
  std::fflush(stdout);
}

Status TrainRun::Resume() {
  if (!a_.resume.empty()) {
    startup_->Phase("reading checkpoint " + a_.resume);
    auto s = ckpt::LoadCheckpoint(*engine_, *comm_, cfg_, a_.resume);
    if (!s.ok()) return s.status().WithContext(fmt::format("rank {}", env_.rank));
    start_ = last_saved_ = *s;
  }
  if (cfg_.objective == Objective::kDpo) {  // Note [DPO]: the initial model's, before any step
    startup_->Phase("DPO reference log-probabilities");
    DpoReferenceInputs in{cfg_, init_from(), !a_.resume.empty(), lead(), [this](const std::string& line) {
                            if (lead()) std::printf("%s\n", line.c_str());
                          }, /*step_dir=*/{}};
    if (!a_.resume.empty()) {
      const StatusOr<std::string> step_dir = ckpt::ResolveStepDir(a_.resume);
      if (step_dir.ok()) in.step_dir = *step_dir;
    }
    STRATA_ASSIGN_OR_RETURN(dpo_reference_, PrepareDpoReference(in, *engine_, *comm_, *data_));
  }
  ProgressOptions po;
  po.first_step = start_;
  po.total_steps = cfg_.steps;
  po.steps_per_print = cfg_.steps_per_print;
  po.flops_per_token = model::ModelSpec(cfg_.model).train_flops_per_token();
  po.wall_clock_breakdown = cfg_.wall_clock_breakdown;
  po.bar = lead() && ::isatty(STDOUT_FILENO);
  po.metrics_path = lead() ? a_.metrics : "";
  po.predicted_step_s = predicted_step_s_;
  po.predicted_binding = predicted_binding_;
  po.sequences_per_step = cfg_.train_batch;
  po.sequences_per_epoch = data_->epoch_windows();
  po.monitors = monitors_.get();
  po.fp16 = cfg_.compute_dtype == DType::kF16;
  progress_ = std::make_unique<Progress>(po);
  STRATA_RETURN_IF_ERROR(progress_->Open());
  if (lead()) {
    heartbeat_ = std::make_unique<StepHeartbeat>(std::chrono::minutes(1),
                                                 [this](const std::string& line) { progress_->Message(line); });
    engine_->OnStepVisit([this](size_t done, size_t total) { heartbeat_->Visit(done, total); });
  }
  startup_.reset();  // start-up is over
  if (lead()) PrintStartup();
  return Status();
}

void TrainRun::PrintStartup() {
  const model::ModelSpec spec(cfg_.model);
  progress_->Message(fmt::format(
      "strata train: {} model, {:.2f} M parameters, {} blocks; {} rank(s), ZeRO stage {}; params on {}, optimizer "
      "states on {}; {} compute on {} ({}); activations {}; batch {} = {} x {} accumulation{}{} x {}; data: {}",
      model::FamilyOf(cfg_.model).display,
      spec.num_parameters() / 1e6, engine_->num_blocks(),
      env_.world_size, cfg_.zero_stage, OffloadDeviceName(cfg_.offload_param.device),
      OptimizerStatesWhere(cfg_.offload_optimizer.device, device_.device->is_host()), DTypeName(cfg_.compute_dtype),
      device_.device->Name(), cfg_.precision_reason,
      cfg_.keep_activations ? std::string("kept (no recompute)")
      : cfg_.block_inputs_at == BlockInputsAt::kDevice
          ? std::string("recomputed per block in backward")
          : fmt::format("recomputed per block in backward, the block inputs waiting in {}",
                        cfg_.block_inputs_at == BlockInputsAt::kHost ? "host memory" : "the swap file"),
      cfg_.train_batch,
      cfg_.micro_batch, cfg_.grad_accum, cfg_.accumulate_on_device ? " (summed on the device)" : "",
      cfg_.grad_accum > 1 ? (cfg_.layer_major ? ", layer-major" : ", micro-batch-major") : "",
      DescribeRanks(cfg_, env_.world_size),
      data_->description()));
  if (cfg_.weight_decay > 0) {
    const std::vector<std::string> no_decay = NoDecayPatterns(cfg_);
    progress_->Message(fmt::format("weight decay {} except on the parameters whose Hugging Face names match "
                                   "strata.no_decay{}: {}", cfg_.weight_decay,
                                   cfg_.no_decay ? "" : " (\"auto\": Hugging Face Trainer's groups)",
                                   no_decay.empty() ? std::string("none") : fmt::format("{}", fmt::join(no_decay, ", "))));
  }
  progress_->Message(cfg_.eval_interval == 0 || cfg_.eval_batches == 0
                         ? std::string("evaluation: none (strata.eval_interval 0)")
                         : fmt::format("evaluation: {} held-out batch(es) of {} x {} tokens per {}rank at the start, "
                                       "every {} steps and at the end", cfg_.eval_batches, cfg_.micro_batch,
                                       cfg_.model.seq_len, cfg_.sequence_parallel > 1 ? "data " : "", cfg_.eval_interval));
  if (cfg_.model.lora.enabled()) {
    int64_t trainable = 0, nf4 = 0;
    for (int i = 0; i < spec.num_blocks(); ++i) {
      trainable += spec.trainable_parameters(i);
      nf4 += spec.nf4_parameters(i);
    }
    const std::string base = cfg_.model.lora.nf4_base()
        ? fmt::format("NF4 for the layers' projections ({:.1f} M, 4.13 bits each: strata.lora.base_dtype), {} for the "
                      "rest", nf4 / 1e6, DTypeName(cfg_.compute_dtype))
        : DTypeName(cfg_.compute_dtype);
    std::vector<std::string> targets = cfg_.model.lora.target_modules;
    for (const std::string& t : cfg_.model.lora.target_parameters) targets.push_back(t);
    progress_->Message(fmt::format("LoRA: r {}, alpha {} on {}: {:.3f} M trainable parameters ({:.2f}%); the base is "
                                   "frozen ({} weights only: no master copy, gradients or Adam states)",
                                   cfg_.model.lora.r, cfg_.model.lora.alpha, fmt::join(targets, ", "), trainable / 1e6,
                                   100.0 * trainable / spec.num_parameters(), base));
  }
  if (!init_from().empty() && a_.resume.empty()) progress_->Message("initial weights from " + init_from());
  if (!a_.resume.empty()) progress_->Message(fmt::format("resumed from {} at step {}", a_.resume, start_));
  if (monitors_) progress_->Message("monitors: " + monitors_->Describe() + " (each step's scalars against the samples seen)");
}

Status TrainRun::Eval(int64_t step) {
  if (cfg_.eval_interval == 0 || cfg_.eval_batches == 0) return Status();  // none asked for
  STRATA_ASSIGN_OR_RETURN(double loss, engine_->EvalLoss(*data_, cfg_.eval_batches));
  if (lead()) progress_->OnEval(step, loss, cfg_.eval_batches, engine_->LastEvalDpo());
  return Status();
}

Status TrainRun::Save(int64_t step) {
  ckpt::SaveOptions so;
  so.keep = cfg_.keep_checkpoints;
  so.folder_lead = save_groups_.leads(env_.rank);
  so.folders = save_groups_.count();
  so.replaces = replaced_;
  if (!dpo_reference_.empty()) so.side_files.emplace_back(kDpoReferenceFile, dpo_reference_);
  if (!cfg_.debug_crash_in_save.empty())
    so.crash_hook = [point = cfg_.debug_crash_in_save, sig = cfg_.debug_crash_signal](const std::string& p) {
      if (p != point) return;
      std::raise(sig);  // tests: a process killed or stopped in the middle of a save
      for (;;) pause();  // a stop signal: the watcher ends the process; the save goes no further
    };
  const auto t0 = std::chrono::steady_clock::now();
  STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*engine_, *comm_, cfg_, a_.save, step, so));
  unsaved_save_dir_.Release();  // it holds a checkpoint now
  replaced_.clear();             // (removed by that save)
  if (lead()) progress_->OnSave(step, a_.save, Seconds(t0));
  last_saved_ = step;
  return Status();
}

// The steps, with the held-out loss at the start and every eval_interval steps, a
// checkpoint every save_interval steps, and the trace of the last step.
Status TrainRun::Loop() {
  if (start_ >= cfg_.steps && lead())
    progress_->Message(fmt::format("resumed at step {}, which is not before strata.steps {}: nothing to train (raise "
                                   "--steps to go on); nothing is saved", start_, cfg_.steps));
  STRATA_RETURN_IF_ERROR(Eval(start_));
  for (int64_t step = start_; step < cfg_.steps; ++step) {
    const double trace_from = tracer_->Now();
    if (heartbeat_) heartbeat_->BeginStep(step);
    auto st = engine_->Step(step, *data_);
    if (!st.ok()) return st.status().WithContext(fmt::format("rank {}", env_.rank));
    if (lead()) progress_->OnStep(*st);
    if (cfg_.eval_interval > 0 && (step + 1) % cfg_.eval_interval == 0 && step + 1 != cfg_.steps)
      STRATA_RETURN_IF_ERROR(Eval(step + 1));
    if (!a_.save.empty() && cfg_.save_interval > 0 && (step + 1) % cfg_.save_interval == 0)
      STRATA_RETURN_IF_ERROR(Save(step + 1));
    tracer_->Trim(trace_from);  // keeps this step's spans (and transfers still running into it)
  }
  // Written before the final save and eval, so the trace holds exactly the last step.
  if (!a_.trace.empty()) {
    const std::string path = env_.world_size > 1 ? fmt::format("{}.rank{}", a_.trace, env_.rank) : a_.trace;
    STRATA_RETURN_IF_ERROR(tracer_->WriteChromeTrace(path));
    if (lead())
      progress_->Message(fmt::format("trace of the last step written to {}{}", path,
                                     env_.world_size > 1 ? " (one file per rank)" : ""));
  }
  return Status();
}

Status TrainRun::Finish() {
  // (A run resumed at or past strata.steps trained nothing: its state is the checkpoint's, and
  // saving it as step `steps` would put an older step's name on a newer state. A fresh run of
  // 0 steps saves its initial state as step 0: what, for one, exports the initial adapters.)
  const bool initial = a_.resume.empty() && cfg_.steps == 0;
  if (!a_.save.empty() && (last_saved_ < cfg_.steps || initial)) STRATA_RETURN_IF_ERROR(Save(cfg_.steps));
  STRATA_RETURN_IF_ERROR(Eval(std::max(start_, cfg_.steps)));
  // The last step's update may still run on the optimizer thread (optimizer_overlap): waited
  // for here, and said, so that an NVMe-bound one (30 s for a 3 B model here) is not a silent
  // pause after the summary, and its error is reported rather than lost at shutdown.
  const auto t0 = std::chrono::steady_clock::now();
  while (engine_->UpdateInFlight() && Seconds(t0) < 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool long_wait = engine_->UpdateInFlight();  // said only when it is long enough to notice
  if (long_wait && lead()) progress_->Message("finishing the last step's optimizer update (writing its states back)");
  STRATA_RETURN_IF_ERROR(engine_->Finish());
  if (long_wait && lead())
    progress_->Message(fmt::format("the last step's optimizer update finished after {:.1f} s", Seconds(t0)));
  if (lead()) {
    ReportMemory();
    if (monitors_) {
      monitors_->Drain();
      if (const int64_t lost = monitors_->lost(); lost > 0)
        progress_->Message(fmt::format("monitors: {} scalar(s) not written (the warning above says why)", lost));
    }
    progress_->Finish();
  }
  return Status();
}

// The run's peak against what `strata estimate` promised, per tier. Host memory: peak
// resident growth since before the engine, less the library code paged in meanwhile
// (file-backed pages the estimate does not cover).
void TrainRun::ReportMemory() {
  const uint64_t peak = ProcStatusBytes("VmHWM:"), file_now = ProcStatusBytes("RssFile:");
  const uint64_t code = file_now - std::min(file_now, file_before_engine_);
  const uint64_t host = peak - std::min(peak, rss_before_engine_ + code);
  progress_->Message(fmt::format("memory of rank 0, measured over the run: host peak {}; page-locked {}; swap files {}",
                                 MeasuredVsEstimated(host, estimate_.host_peak()),
                                 MeasuredVsEstimated(PageLockedByStrata().peak, estimate_.pinned),
                                 MeasuredVsEstimated(engine_->swap_bytes_on_disk(), estimate_.nvme_on_disk)));
}

int RunTrain(const TrainArgs& a) {
  if (a.nproc > 1 && !IsLaunchedRank()) {
    LaunchOptions lo;
    lo.nproc = a.nproc;
    lo.argv = CurrentArgv();
    return LaunchLocalRanks(lo);  // it forwards the stop signals to the ranks
  }
  StopOnSignals();
  return TrainRun(a).Run();
}

}  // namespace

StatusOr<TrainConfig> ReadTrainConfig(const std::string& config, const std::string& strata_file,
                                      std::vector<std::string> sets, std::string* origin) {
  *origin = "built-in tiny config (configs/tiny_cpu.json)";
  STRATA_ASSIGN_OR_RETURN(std::string text, ComposeConfigText(config, kDefaultConfigJson, strata_file, sets, origin));
  return ParseTrainConfig(text, *origin);
}

StatusOr<RunConfig> ReadSettledConfig(const std::string& config, const std::string& strata_file,
                                      std::vector<std::string> sets, int world) {
  std::string origin;
  STRATA_ASSIGN_OR_RETURN(TrainConfig written, ReadTrainConfig(config, strata_file, std::move(sets), &origin));
  const bool on_gpu = SpecNamesGpu(written.device);
  auto settled = SettleRunConfig(std::move(written), {world, world, on_gpu, {!on_gpu}});
  if (!settled.ok()) return settled.status().WithContext(origin);
  return settled->config;
}

void AddTrainCommand(CLI::App& app, Action* action) {
  auto* cmd = app.add_subcommand("train", "train a model (ZeRO stages 0-3, CPU/NVMe offload); the loss of every "
                                          "logged step goes to standard output");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("--config", a->config, "ds_config.json (DeepSpeed keys + a \"strata\" section); default: the "
                                         "built-in tiny config");
  cmd->add_option("--strata", a->strata_file, "a second JSON file holding the \"strata\" section (model, data, run)");
  cmd->add_option("--steps", a->steps, "optimizer steps (overrides strata.steps)");
  cmd->add_option("--seed", a->seed, "seed for init and data (overrides strata.seed)");
  cmd->add_option("--nproc", a->nproc, "start this many local ranks")->check(CLI::Range(1, 1024));
  cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto) of the last step to FILE");
  cmd->add_option("--set", a->sets, "override a config key: --set zero_optimization.stage=2");
  cmd->add_option("--save", a->save, "checkpoint folder: saves every save_interval steps and at the end");
  cmd->add_option("--save-interval", a->save_interval, "steps between checkpoints (overrides strata.save_interval)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  cmd->add_option("--resume", a->resume, "continue from a checkpoint folder (its latest step) or a step folder");
  cmd->add_flag("--overwrite", a->overwrite, "let --save replace the checkpoints another run left in that folder "
                                             "(without it, a folder holding checkpoints is used only by --resume)");
  cmd->add_option("--init-from", a->init_from, "initial weights from a Hugging Face model folder (its config.json sets "
                                               "the architecture: " + model::FamilyDisplayNames() + ") or a safetensors "
                                               "file (architecture from strata.model)");
  cmd->add_option("--metrics", a->metrics, "write one JSON object per step to FILE.jsonl");
  cmd->add_flag("--predict", a->predict, "measure this machine first (a few seconds) and print the step-time model's "
                                         "prediction, and at the end beside the measured step");
  cmd->add_flag("--no-fit-check", a->no_fit_check, "start even if the memory estimate exceeds this machine");
  cmd->add_flag("--memory-only", a->memory_only, "create the engine, print the memory it allocated per tier beside the "
                                                 "estimate, and exit");
  cmd->callback([=] { *action = [=] { return RunTrain(*a); }; });
}

int RunDefaultTraining() {
  TrainArgs a;
  a.nproc = 2;
  return RunTrain(a);
}

}  // namespace strata::cli
