// `strata train`: the training loop around the Engine, on one rank of a launch (torchrun,
// Slurm, or `--nproc N`, which starts N local ranks itself).
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <thread>

#include "src/cli/commands.h"
#include "src/cli/default_config.h"
#include "src/comm/launcher.h"
#include "src/engine/engine.h"
#include "src/engine/train_config.h"
#include "strata/log.h"

namespace strata::cli {
namespace {

struct TrainArgs {
  std::string config;  // "" = the built-in tiny config
  int64_t steps = -1;
  int64_t seed = -1;
  int nproc = 1;
  std::string trace;
  std::vector<std::string> sets;
};

StatusOr<TrainConfig> ResolveConfig(const TrainArgs& a) {
  std::string text = kDefaultConfigJson;
  std::string origin = "built-in tiny config (configs/tiny_cpu.json)";
  if (!a.config.empty()) {
    FILE* f = std::fopen(a.config.c_str(), "rb");
    if (!f) return ErrnoError(errno, "cannot open config file '{}'", a.config);
    text.clear();
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
    origin = a.config;
  }
  std::vector<std::string> sets = a.sets;
  if (a.steps >= 0) sets.push_back(fmt::format("strata.steps={}", a.steps));
  if (a.seed >= 0) sets.push_back(fmt::format("strata.seed={}", a.seed));
  STRATA_ASSIGN_OR_RETURN(std::string resolved, ApplyOverrides(text, sets));
  return ParseTrainConfig(resolved, origin);
}

int Fail(const Status& s) {
  LogError("{}", s.ToString());
  return 1;
}

}  // namespace

int RunTrain(const TrainArgs& a) {
  if (a.nproc > 1 && !IsLaunchedRank()) {
    LaunchOptions lo;
    lo.nproc = a.nproc;
    lo.argv = CurrentArgv();
    return LaunchLocalRanks(lo);
  }
  auto env = LaunchEnv::FromEnvironment();
  if (!env.ok()) return Fail(env.status());
  auto cfg_or = ResolveConfig(a);
  if (!cfg_or.ok()) return Fail(cfg_or.status());
  TrainConfig& cfg = *cfg_or;
  const bool lead = env->rank == 0;
  if (lead)
    for (const auto& w : cfg.warnings) LogWarn("config key '{}' is not used by Strata; ignored", w);

  // Share the cores between the local ranks: LibTorch's and OpenMP's pools alike.
  const int local_ranks = std::max(1, a.nproc > 1 ? a.nproc : env->world_size);
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
  torch::set_num_threads(threads);
  omp_set_num_threads(threads);

  std::unique_ptr<Communicator> comm;
  if (env->world_size > 1) {
    auto c = MakeTcpCommunicator(*env, std::chrono::seconds(120));
    if (!c.ok()) return Fail(c.status());
    comm = std::move(c).value();
  } else {
    comm = MakeSingleRankCommunicator();
  }

  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  if (!data.ok()) return Fail(data.status());
  Tracer tracer(env->rank);
  auto engine_or = Engine::Create(cfg, comm.get(), &tracer);
  if (!engine_or.ok()) return Fail(engine_or.status().WithContext(fmt::format("rank {}", env->rank)));
  Engine& engine = **engine_or;
  const model::ModelSpec spec(cfg.model);
  if (lead) {
    std::printf("strata train: %s model, %.2f M parameters, %d blocks; %d rank(s), ZeRO stage %d; params on %s, "
                "optimizer states on %s; %s compute; data: %s\n",
                cfg.model.arch == model::Arch::kGpt2 ? "GPT-2" : "LLaMA", spec.num_parameters() / 1e6,
                engine.num_blocks(), env->world_size, cfg.zero_stage, OffloadDeviceName(cfg.offload_param.device),
                OffloadDeviceName(cfg.offload_optimizer.device), DTypeName(cfg.compute_dtype),
                (*data)->description().c_str());
    std::fflush(stdout);
  }

  auto eval = [&](int64_t step) -> Status {
    STRATA_ASSIGN_OR_RETURN(double loss, engine.EvalLoss(**data, cfg.eval_batches));
    if (lead) std::printf("eval  step %5lld  loss %.4f (held-out, %lld batches)\n", (long long)step, loss,
                          (long long)cfg.eval_batches);
    std::fflush(stdout);
    return Status();
  };
  if (Status s = eval(0); !s.ok()) return Fail(s);

  double sum_wait = 0, sum_time = 0, trace_from = 0;
  int64_t measured = 0;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    trace_from = tracer.Now();
    auto st = engine.Step(step, **data);
    if (!st.ok()) return Fail(st.status().WithContext(fmt::format("rank {}", env->rank)));
    if (step > 0) {  // the first step pays one-time costs
      sum_wait += st->wait_s;
      sum_time += st->seconds;
      ++measured;
    }
    if (lead && (step % cfg.steps_per_print == 0 || step + 1 == cfg.steps)) {
      std::printf("train step %5lld  loss %.4f  lr %.3g  grad norm %.3f%s  %.0f tokens/s  step %.1f ms  "
                  "exposed I/O %.1f ms  nvme r/w %.1f/%.1f MB\n",
                  (long long)step, st->loss, st->lr, st->grad_norm, st->skipped ? " (skipped: overflow)" : "",
                  st->tokens / st->seconds, st->seconds * 1e3, st->wait_s * 1e3, st->nvme_read_bytes / 1e6,
                  st->nvme_write_bytes / 1e6);
      std::fflush(stdout);
    }
    if (cfg.eval_interval > 0 && (step + 1) % cfg.eval_interval == 0 && step + 1 != cfg.steps)
      if (Status s = eval(step + 1); !s.ok()) return Fail(s);
    if (a.trace.empty() || step + 1 < cfg.steps) tracer.Trim(trace_from);
  }
  if (Status s = eval(cfg.steps); !s.ok()) return Fail(s);
  if (!a.trace.empty()) {
    const std::string path = env->world_size > 1 ? fmt::format("{}.rank{}", a.trace, env->rank) : a.trace;
    if (Status s = tracer.WriteChromeTrace(path); !s.ok()) return Fail(s);
    if (lead) std::printf("trace of the last step written to %s%s\n", path.c_str(), env->world_size > 1 ? " (one file per rank)" : "");
  }
  if (lead && measured > 0)
    std::printf("summary: %lld steps, mean step %.1f ms, exposed transfer time %.1f ms per step (%.1f%% of the step)\n",
                (long long)cfg.steps, sum_time / measured * 1e3, sum_wait / measured * 1e3, 100.0 * sum_wait / sum_time);
  return 0;
}

void AddTrainCommand(CLI::App& app, Action* action) {
  auto* cmd = app.add_subcommand("train", "train a model (ZeRO stages 0-3, CPU/NVMe offload); the loss of every "
                                          "logged step goes to standard output");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("--config", a->config, "ds_config.json (DeepSpeed keys + a \"strata\" section); default: the "
                                         "built-in tiny config");
  cmd->add_option("--steps", a->steps, "optimizer steps (overrides strata.steps)");
  cmd->add_option("--seed", a->seed, "seed for init and data (overrides strata.seed)");
  cmd->add_option("--nproc", a->nproc, "start this many local ranks")->check(CLI::Range(1, 1024));
  cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto) of the last step to FILE");
  cmd->add_option("--set", a->sets, "override a config key: --set zero_optimization.stage=2");
  cmd->callback([=] { *action = [=] { return RunTrain(*a); }; });
}

int RunDefaultTraining() {
  TrainArgs a;
  a.nproc = 2;
  return RunTrain(a);
}

}  // namespace strata::cli
