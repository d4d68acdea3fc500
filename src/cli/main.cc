// build/strata: the composition root. Parses the command line and runs one subcommand.
#include <cstdio>

#include "src/base/temporaries.h"
#include "src/cli/commands.h"
#include "src/comm/launcher.h"

namespace strata::cli {

namespace {
std::vector<std::string> g_argv;
}

void SetCurrentArgv(int argc, char** argv) { g_argv.assign(argv, argv + argc); }
const std::vector<std::string>& CurrentArgv() { return g_argv; }

}  // namespace strata::cli

int main(int argc, char** argv) {
  CLI::App app{"Strata: a ZeRO-3 trainer with CPU and NVMe offload for models larger than their GPUs"};
  app.require_subcommand(0, 1);
  strata::cli::SetCurrentArgv(argc, argv);
  strata::cli::Action action;
  strata::cli::AddDoctorCommand(app, &action);
  strata::cli::AddTrainCommand(app, &action);
  strata::cli::AddConfigCommand(app, &action);
  strata::cli::AddExportCommand(app, &action);
  strata::cli::AddEstimateCommand(app, &action);
  strata::cli::AddGenerateCommand(app, &action);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks, each against its anchor measured in the same run");
  bench->require_subcommand(1);
  strata::cli::AddBenchIoCommand(*bench, &action);
  strata::cli::AddBenchAdamCommand(*bench, &action);
  strata::cli::AddBenchKernelCommands(*bench, &action);
  strata::cli::AddBenchStepCommand(*bench, &action);
  strata::cli::AddBenchTuneCommand(*bench, &action);
  strata::cli::AddBenchLinksCommand(*bench, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!action) {
    if (!strata::IsLaunchedRank())  // the launched ranks re-run this same command line
      std::printf("strata: no subcommand given; running the default job: the tiny GPT-2 on 2 local ranks with "
                "parameters and optimizer states on NVMe (strata train --nproc 2; see strata --help)\n");
    std::fflush(stdout);
    action = strata::cli::RunDefaultTraining;
  }
  // Errors are Statuses; an exception reaching here is a bug or a library's refusal (LibTorch,
  // the standard library): it is reported, and the outputs in progress are removed.
  try {
    return action();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    for (const std::string& path : strata::RemoveTemporaries())
      std::fprintf(stderr, "removed the unfinished '%s'\n", path.c_str());
    return 1;
  }
}
