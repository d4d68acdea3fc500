// `strata bench init` (drawing initial weights, FillNormal vs LibTorch's normal_) and
// `strata bench accumulate` (the host gradient accumulation vs LibTorch's add_): the
// host-side kernels of issue 16, each against the LibTorch call it replaced, same run.
#include <memory>

#include "bench/accumulate_bench.h"
#include "bench/init_bench.h"
#include "src/cli/commands.h"

namespace strata::cli {
namespace {

// The flags every kernel benchmark has.
void AddRoundsAndJson(CLI::App* cmd, int* rounds, bool* json) {
  cmd->add_option("--rounds", *rounds, "interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--json", *json, "print one JSON object");
}

}  // namespace

void AddBenchKernelCommands(CLI::App& bench, Action* action) {
  auto* init = bench.add_subcommand("init", "drawing initial weights: FillNormal vs LibTorch's normal_, one thread "
                                            "and every thread");
  auto init_opts = std::make_shared<bench::InitBenchOptions>();
  init->add_option("--values", init_opts->values, "fp32 values per thread and draw")->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 32));
  AddRoundsAndJson(init, &init_opts->rounds, &init_opts->json);
  init->callback([=] { *action = [=] { return bench::RunInitBench(*init_opts); }; });

  auto* acc = bench.add_subcommand("accumulate", "adding a reduced gradient into the host accumulators (fp32 and "
                                                 "bf16): AccumulateGradient vs LibTorch's add_, every thread");
  auto acc_opts = std::make_shared<bench::AccumulateBenchOptions>();
  acc->add_option("--values", acc_opts->values, "elements per accumulator")->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 32));
  AddRoundsAndJson(acc, &acc_opts->rounds, &acc_opts->json);
  acc->callback([=] { *action = [=] { return bench::RunAccumulateBench(*acc_opts); }; });
}

}  // namespace strata::cli
