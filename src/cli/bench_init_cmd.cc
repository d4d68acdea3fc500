// `strata bench init`: drawing initial weights, FillNormal vs LibTorch's normal_ (issue 16).
#include <memory>

#include "bench/init_bench.h"
#include "src/cli/commands.h"

namespace strata::cli {

void AddBenchInitCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("init", "drawing initial weights: FillNormal vs LibTorch's normal_, one thread "
                                           "and every thread");
  auto opts = std::make_shared<bench::InitBenchOptions>();
  cmd->add_option("--values", opts->values, "fp32 values per thread and draw")->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 32));
  cmd->add_option("--rounds", opts->rounds, "interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->callback([=] { *action = [=] { return bench::RunInitBench(*opts); }; });
}

}  // namespace strata::cli
