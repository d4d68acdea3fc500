// `strata train`: the training loop around the Engine, on one rank of a launch (torchrun,
// Slurm, or `--nproc N`, which starts N local ranks itself): config, memory check,
// --init-from, --resume, checkpoints every save_interval steps, progress.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/hf_loader.h"
#include "src/cli/commands.h"
#include "src/cli/default_config.h"
#include "src/cli/progress.h"
#include "src/cli/train_config_cli.h"
#include "src/comm/launcher.h"
#include "src/data/data.h"
#include "src/engine/compute_device.h"
#include "src/engine/engine.h"
#include "src/engine/train_config.h"
#include "src/estimate/estimator.h"
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
};

int Fail(const Status& s) {
  LogError("{}", s.ToString());
  return 1;
}

// This process's resident memory (now and peak) from /proc/self/status, beside the ledger.
uint64_t ProcStatusBytes(const char* key) { return ProcKilobyteField("/proc/self/status", key); }

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

StatusOr<TrainConfig> ResolveTrainConfig(const std::string& config, const std::string& strata_file,
                                         std::vector<std::string> sets, int world_size) {
  std::string origin = "built-in tiny config (configs/tiny_cpu.json)";
  STRATA_ASSIGN_OR_RETURN(std::string text, ComposeConfigText(config, kDefaultConfigJson, strata_file, sets, &origin));
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, ParseTrainConfig(text, origin));
  if (Status s = ResolveBatch(&cfg, world_size); !s.ok()) return s.WithContext(origin);
  ResolvePrecision(&cfg, ComputeDevice::NamesGpu(cfg.device));
  return cfg;
}

int RunTrain(const TrainArgs& a) {
  if (a.nproc > 1 && !IsLaunchedRank()) {
    LaunchOptions lo;
    lo.nproc = a.nproc;
    lo.argv = CurrentArgv();
    return LaunchLocalRanks(lo);
  }
  auto env = LaunchEnv::FromEnvironment();
  if (!env.ok()) return Fail(env.status());
  std::vector<std::string> sets = a.sets;
  if (a.steps >= 0) sets.push_back(fmt::format("strata.steps={}", a.steps));
  if (a.seed >= 0) sets.push_back(fmt::format("strata.seed={}", a.seed));
  if (a.save_interval >= 0) sets.push_back(fmt::format("strata.save_interval={}", a.save_interval));
  auto cfg_or = ResolveTrainConfig(a.config, a.strata_file, sets, env->world_size);
  if (!cfg_or.ok()) return Fail(cfg_or.status());
  TrainConfig& cfg = *cfg_or;
  const bool lead = env->rank == 0;
  if (lead) {
    for (const auto& w : cfg.warnings) LogWarn("config key '{}' is not used by Strata; ignored", w);
    for (const auto& n : cfg.notes) LogInfo("config: {}", n);
    if (!cfg.precision_warning.empty()) LogWarn("{}", cfg.precision_warning);
  }

  // Refuse a config that cannot fit before allocating anything.
  const int local_ranks = std::max(1, a.nproc > 1 ? a.nproc : env->world_size);
  const MemoryEstimate estimate = EstimateMemory(cfg, env->world_size);
  if (!a.no_fit_check)
    if (Status s = CheckFits(estimate, ProbeMachine(cfg), local_ranks); !s.ok()) return Fail(s);

  // Share the cores between the local ranks: LibTorch's and OpenMP's pools alike.
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
  torch::set_num_threads(threads);
  omp_set_num_threads(threads);

  std::unique_ptr<Communicator> comm;
  if (env->world_size > 1) {
    // A dead peer closes its sockets (the others fail at once); a hung one is caught by this
    // timeout, so no rank waits forever.
    auto c = MakeTcpCommunicator(*env, std::chrono::seconds(cfg.comm_timeout_s));
    if (!c.ok()) return Fail(c.status());
    comm = std::move(c).value();
  } else {
    comm = MakeSingleRankCommunicator();
  }

  // Where blocks run; a GPU gets NCCL for its device buffers, met through the host communicator.
  auto device = OpenComputeDevice(cfg.device, env->local_rank, comm.get());
  if (!device.ok()) return Fail(device.status().WithContext(fmt::format("rank {}", env->rank)));
  const ComputeDevice& compute_device = (*device)->device;

  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  if (!data.ok()) return Fail(data.status());
  const model::ModelSpec spec(cfg.model);
  EngineHooks hooks;
  if (!a.init_from.empty() && a.resume.empty()) {
    auto w = ckpt::HfWeights::Open(a.init_from, cfg.model);
    if (!w.ok()) return Fail(w.status().WithContext("--init-from"));
    hooks = ckpt::MakeInitFromHooks(*w, spec.num_blocks());
  } else if (!a.init_from.empty() && lead) {
    LogWarn("--init-from {} ignored: --resume restores all weights", a.init_from);
  }
  Tracer tracer(env->rank);
  const uint64_t rss_before_engine = ProcStatusBytes("VmRSS:"), file_before_engine = ProcStatusBytes("RssFile:");
  auto engine_or = Engine::Create(cfg, comm.get(), &tracer, std::move(hooks), &compute_device);
  if (!engine_or.ok()) return Fail(engine_or.status().WithContext(fmt::format("rank {}", env->rank)));
  Engine& engine = **engine_or;

  if (lead) {
    // What this rank allocated (the engine's ledger) beside what the estimator predicted.
    const MemoryLedger& m = engine.ledger();
    auto pair = [&](Residence r) {
      return fmt::format("{} (estimated {})", HumanBytes(m.Total(r)), HumanBytes(estimate.ledger.Total(r)));
    };
    const std::string line = fmt::format(
        "memory per rank (the engine's ledger): device {}, cpu {}, nvme {}; swap files on disk {} (estimated {}); "
        "estimated peak host memory {} (see the measured figure at the end)",
        pair(Residence::kDevice), pair(Residence::kCpu), pair(Residence::kNvme),
        HumanBytes(engine.swap_bytes_on_disk()), HumanBytes(estimate.nvme_on_disk),
        HumanBytes(estimate.host_peak()));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  if (a.memory_only) return 0;

  int64_t start = 0;
  if (!a.resume.empty()) {
    auto s = ckpt::LoadCheckpoint(engine, *comm, cfg, a.resume);
    if (!s.ok()) return Fail(s.status().WithContext(fmt::format("rank {}", env->rank)));
    start = *s;
  }

  ProgressOptions po;
  po.first_step = start;
  po.total_steps = cfg.steps;
  po.steps_per_print = cfg.steps_per_print;
  po.flops_per_token = spec.train_flops_per_token();
  po.wall_clock_breakdown = cfg.wall_clock_breakdown;
  po.bar = lead && ::isatty(STDOUT_FILENO);
  po.metrics_path = lead ? a.metrics : "";
  Progress progress(po);
  if (Status s = progress.Open(); !s.ok()) return Fail(s);
  if (lead) {
    progress.Message(fmt::format(
        "strata train: {} model, {:.2f} M parameters, {} blocks; {} rank(s), ZeRO stage {}; params on {}, optimizer "
        "states on {}; {} compute on {} ({}); batch {} = {} x {} accumulation x {} rank(s); data: {}",
        cfg.model.arch == model::Arch::kGpt2 ? "GPT-2" : "LLaMA", spec.num_parameters() / 1e6, engine.num_blocks(),
        env->world_size, cfg.zero_stage, OffloadDeviceName(cfg.offload_param.device),
        OffloadDeviceName(cfg.offload_optimizer.device), DTypeName(cfg.compute_dtype), compute_device.device().str(), cfg.precision_reason, cfg.train_batch,
        cfg.micro_batch,
        cfg.grad_accum, env->world_size, (*data)->description()));
    if (!a.init_from.empty() && a.resume.empty()) progress.Message("initial weights from " + a.init_from);
    if (!a.resume.empty()) progress.Message(fmt::format("resumed from {} at step {}", a.resume, start));
  }

  auto eval = [&](int64_t step) -> Status {
    STRATA_ASSIGN_OR_RETURN(double loss, engine.EvalLoss(**data, cfg.eval_batches));
    if (lead) progress.OnEval(step, loss, cfg.eval_batches);
    return Status();
  };
  ckpt::SaveOptions so;
  so.keep = cfg.keep_checkpoints;
  if (!cfg.debug_crash_in_save.empty())
    so.crash_hook = [point = cfg.debug_crash_in_save](const std::string& p) {
      if (p == point) std::raise(SIGKILL);  // tests: a process killed in the middle of a save
    };
  auto save = [&](int64_t step) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(engine, *comm, cfg, a.save, step, so));
    if (lead) progress.OnSave(step, a.save, Seconds(t0));
    return Status();
  };
  if (Status s = eval(start); !s.ok()) return Fail(s);

  int64_t last_saved = start;
  for (int64_t step = start; step < cfg.steps; ++step) {
    const double trace_from = tracer.Now();
    auto st = engine.Step(step, **data);
    if (!st.ok()) return Fail(st.status().WithContext(fmt::format("rank {}", env->rank)));
    if (lead) progress.OnStep(*st);
    if (cfg.eval_interval > 0 && (step + 1) % cfg.eval_interval == 0 && step + 1 != cfg.steps)
      if (Status s = eval(step + 1); !s.ok()) return Fail(s);
    if (!a.save.empty() && cfg.save_interval > 0 && (step + 1) % cfg.save_interval == 0) {
      if (Status s = save(step + 1); !s.ok()) return Fail(s);
      last_saved = step + 1;
    }
    tracer.Trim(trace_from);  // keeps this step's spans (and transfers still running into it)
  }
  // Written before the final save and eval, so the trace holds exactly the last step.
  if (!a.trace.empty()) {
    const std::string path = env->world_size > 1 ? fmt::format("{}.rank{}", a.trace, env->rank) : a.trace;
    if (Status s = tracer.WriteChromeTrace(path); !s.ok()) return Fail(s);
    if (lead)
      progress.Message(fmt::format("trace of the last step written to {}{}", path,
                                   env->world_size > 1 ? " (one file per rank)" : ""));
  }
  if (!a.save.empty() && last_saved != cfg.steps)
    if (Status s = save(cfg.steps); !s.ok()) return Fail(s);
  if (Status s = eval(cfg.steps); !s.ok()) return Fail(s);
  if (lead) {
    // The run's peak against what `strata estimate` promised, per tier. Host memory: peak
    // resident growth since before the engine, less the library code paged in meanwhile
    // (file-backed pages the estimate does not cover).
    const uint64_t peak = ProcStatusBytes("VmHWM:"), file_now = ProcStatusBytes("RssFile:");
    const uint64_t code = file_now - std::min(file_now, file_before_engine);
    const uint64_t host = peak - std::min(peak, rss_before_engine + code);
    auto vs = [](uint64_t measured, uint64_t estimated) {
      return fmt::format("{} (estimated {}, {:+.1f}%)", HumanBytes(measured), HumanBytes(estimated),
                         estimated ? 100.0 * (static_cast<double>(estimated) - measured) / measured : 0.0);
    };
    progress.Message(fmt::format("memory of rank 0, measured over the run: host peak {}; page-locked {}; swap files {}",
                                 vs(host, estimate.host_peak()), vs(ProcStatusBytes("VmLck:"), estimate.pinned),
                                 vs(engine.swap_bytes_on_disk(), estimate.nvme_on_disk)));
    progress.Finish();
  }
  return 0;
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
  cmd->add_option("--init-from", a->init_from, "initial weights from a safetensors file (Hugging Face GPT-2 / LLaMA "
                                               "names, or strata export)");
  cmd->add_option("--metrics", a->metrics, "write one JSON object per step to FILE.jsonl");
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
