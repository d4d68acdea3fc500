// build/strata: the composition root. Parses the command line and runs one subcommand.
#include <cstdio>

#include "bench/io_bench.h"
#include "src/cli/commands.h"

namespace strata::cli {

int RunDefaultJob() {
  // Until training exists, the main job is the offload bandwidth benchmark.
  std::printf("strata: no subcommand given; running the default job: strata bench io (see strata --help)\n");
  std::fflush(stdout);
  return bench::RunIoBench(bench::IoBenchOptions{});
}

}  // namespace strata::cli

int main(int argc, char** argv) {
  CLI::App app{"Strata: a ZeRO-3 trainer with CPU and NVMe offload for models larger than their GPUs"};
  app.require_subcommand(0, 1);
  strata::cli::Action action;
  strata::cli::AddDoctorCommand(app, &action);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks, each against its anchor measured in the same run");
  bench->require_subcommand(1);
  strata::cli::AddBenchIoCommand(*bench, &action);
  strata::cli::AddBenchAdamCommand(*bench, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!action) return strata::cli::RunDefaultJob();
  return action();
}
