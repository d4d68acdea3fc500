// `strata bench tune`: the aio settings and pinned buffer count for this machine's disk, for a
// given config (its model sizes the buffers; --write puts the settings into it).
#include "bench/bench_util.h"
#include "bench/io_point.h"
#include "bench/io_tune.h"
#include "src/cli/commands.h"
#include "src/cli/stop_on_signal.h"
#include "src/cli/train_config_cli.h"
#include "src/engine/shard_plan.h"
#include "strata/log.h"

namespace strata::cli {
namespace {

struct TuneArgs {
  std::string config, dir, size = "256M", out;
  double budget_s = 150;
  int nproc = 1;
  bool write = false, no_fio = false;
};

// What the engine would do with this config: the folder it swaps to, its parameter pool's
// buffer size and its prefetch byte budget (the engine's own ShardPlan, for rank 0 of nproc).
Status DescribeConfig(const TuneArgs& a, bench::TuneOptions* o) {
  STRATA_ASSIGN_OR_RETURN(RunConfig run, ReadSettledConfig(a.config, "", {}, a.nproc));
  const SettledConfig& cfg = *run;
  const bool param_nvme = cfg.offload_param.device == Tier::kNvme;
  const bool optim_nvme = cfg.offload_optimizer.device == Tier::kNvme;
  o->sweep.dir = !a.dir.empty() ? a.dir
                 : param_nvme   ? cfg.offload_param.nvme_path
                 : optim_nvme   ? cfg.offload_optimizer.nvme_path
                                : o->sweep.dir;
  if (!param_nvme) {
    o->buffer_note = "zero_optimization.offload_param is not on nvme in this config";
    return Status();
  }
  const ShardPlan plan = ShardPlan::Make(cfg, ModelShape::Of(cfg.model), a.nproc, /*rank=*/0);
  o->param_buffer_bytes = plan.param_pool.buffer_bytes;
  o->prefetch_budget_bytes = std::max<uint64_t>(1, cfg.prefetch_bucket_size * DTypeSize(cfg.compute_dtype));
  return Status();
}

int RunTune(const TuneArgs& a) {
  bench::TuneOptions o;
  o.budget_s = a.budget_s;
  o.config_path = a.config;
  o.write = a.write;
  o.out_dir = a.out;
  o.sweep.run_fio = !a.no_fio;
  auto size = bench::ParseBytes(a.size, "--size");
  if (!size.ok()) return LogError("{}", size.status().message()), 2;
  o.sweep.size = *size;
  if (Status s = DescribeConfig(a, &o); !s.ok()) return LogError("bench tune: {}", s.message()), 2;
  StopOnSignals();  // Ctrl-C removes the swap folders (and fio's files in them)
  return bench::RunIoTune(o);
}

}  // namespace

void AddBenchTuneCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("tune", "a short I/O sweep (bounded time), then the aio block_size / queue_depth "
                                           "and offload_param.buffer_count to use, with each figure's fraction of "
                                           "the best measured; --write puts them into --config");
  auto a = std::make_shared<TuneArgs>();
  cmd->add_option("--config", a->config, "ds_config.json the settings are for (default: the built-in tiny config); "
                                         "its model sizes the buffers, its nvme_path is measured");
  cmd->add_option("--dir", a->dir, "folder to measure (default: the config's nvme_path)");
  cmd->add_option("--budget-s", a->budget_s, "seconds to spend measuring: one round over all 28 settings, then "
                  "repeats of the contenders")->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--size", a->size, "bytes per pass")->capture_default_str();
  cmd->add_option("--nproc", a->nproc, "ranks the config will train with (sizes the shards)")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--write", a->write, "rewrite --config with the settings (other keys kept; the original kept "
                                     "as FILE.bak)");
  cmd->add_option("--out", a->out, "also write what was measured as io_tune.csv, .json and .svg into this folder");
  cmd->add_flag("--no-fio", a->no_fio, "do not run fio (no fractions of fio's figures)");
  cmd->callback([=] { *action = [=] { return RunTune(*a); }; });
}

}  // namespace strata::cli
