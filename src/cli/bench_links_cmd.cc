// `strata bench links`: every link a step uses in one table, each against its anchor.
#include "bench/bench_util.h"
#include "bench/links_bench.h"
#include "src/cli/commands.h"
#include "src/cli/stop_on_signal.h"
#include "strata/log.h"

namespace strata::cli {

void AddBenchLinksCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("links", "every link a step uses, each against its anchor in the same run: pinned "
                                            "memcpy (1 and all threads) vs pageable, NVMe read/write through the tier "
                                            "vs fio, and (CUDA build, GPU present) H2D/D2H vs raw cudaMemcpyAsync, "
                                            "pageable copies and the PCIe link");
  auto o = std::make_shared<bench::LinksOptions>();
  auto block = std::make_shared<std::string>("1M");
  auto nvme_size = std::make_shared<std::string>("512M");
  auto copy_size = std::make_shared<std::string>("256M");
  cmd->add_option("--dir", o->dir, "folder on the drive to measure")->capture_default_str();
  cmd->add_option("--block", *block, "aio block_size of the NVMe rows")->capture_default_str();
  cmd->add_option("--qd", o->queue_depth, "aio queue_depth of the NVMe rows")->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--nvme-size", *nvme_size, "bytes per NVMe pass")->capture_default_str();
  cmd->add_option("--copy-size", *copy_size, "bytes per host or GPU copy")->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--no-fio{false}", o->run_fio, "do not run fio");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([=] {
    *action = [=] {
      auto b = bench::ParseBytes(*block, "--block");
      auto n = bench::ParseBytes(*nvme_size, "--nvme-size");
      auto c = bench::ParseBytes(*copy_size, "--copy-size");
      for (const auto* v : {&b, &n, &c})
        if (!v->ok()) return LogError("{}", v->status().message()), 2;
      o->block = static_cast<uint32_t>(*b);
      o->nvme_bytes = *n;
      o->copy_bytes = (*c + 4095) / 4096 * 4096;
      StopOnSignals();  // Ctrl-C removes the swap folder
      return bench::RunLinksBench(*o);
    };
  });
}

}  // namespace strata::cli
