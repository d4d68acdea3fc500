// `strata estimate`: per-rank bytes on the compute device, (pinned) CPU memory and NVMe for
// a config, and whether it fits this machine, without allocating.
#include <cstdio>

#include "src/cli/commands.h"
#include "src/cli/train_config_cli.h"
#include "src/estimate/estimator.h"

namespace strata::cli {

void AddEstimateCommand(CLI::App& app, Action* action) {
  struct Args {
    std::string config, strata_file;
    std::vector<std::string> sets;
    int nproc = 1;
    double params = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("estimate", "per-rank memory by tier (device / cpu / nvme) for a config, and "
                                             "whether it fits this machine");
  cmd->add_option("--config", a->config, "ds_config.json (default: the built-in tiny config)");
  cmd->add_option("--strata", a->strata_file, "a second JSON file holding the \"strata\" section");
  cmd->add_option("--set", a->sets, "override a config key");
  cmd->add_option("--nproc", a->nproc, "ranks on this node (the world size)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--params", a->params, "scale the config's model to this many parameters (e.g. 1e9)");
  cmd->callback([=] {
    *action = [=] {
      auto cfg = ResolveTrainConfig(a->config, a->strata_file, a->sets, a->nproc);
      if (!cfg.ok()) {
        std::fprintf(stderr, "error: %s\n", cfg.status().message().c_str());
        return 1;
      }
      const MemoryEstimate e = EstimateMemory(*cfg, a->nproc, static_cast<int64_t>(a->params));
      const MachineCapacity m = ProbeMachine(*cfg);
      std::printf("%.4g M parameters, %d rank(s), ZeRO stage %d, %s compute, micro-batch %lld x seq %lld; params on "
                  "%s, optimizer states on %s\n\n%s\n",
                  e.parameters / 1e6, a->nproc, cfg->zero_stage, DTypeName(cfg->compute_dtype),
                  (long long)cfg->micro_batch, (long long)cfg->model.seq_len, OffloadDeviceName(cfg->offload_param.device),
                  OffloadDeviceName(cfg->offload_optimizer.device), FormatEstimate(e).c_str());
      std::printf("this node (%d rank(s)): host memory %s needed, %s available; NVMe %s needed, %s free%s\n", a->nproc,
                  HumanBytes(e.node_host_bytes(a->nproc)).c_str(), HumanBytes(m.host_available).c_str(),
                  HumanBytes(e.node_nvme_bytes(a->nproc)).c_str(),
                  m.nvme_dir.empty() ? "-" : HumanBytes(m.nvme_free).c_str(),
                  m.nvme_dir.empty() ? "" : (" in " + m.nvme_dir).c_str());
      const Status fits = CheckFits(e, m, a->nproc);
      std::printf("fits this machine: %s\n", fits.ok() ? "yes" : ("no\n" + fits.message()).c_str());
      return 0;
    };
  });
}

}  // namespace strata::cli
