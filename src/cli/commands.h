// Subcommands of build/strata. Each Add* registers its options and a callback that sets
// the process exit code through `int* exit_code`-style results (see main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

// The action chosen on the command line; main runs it after parsing.
using Action = std::function<int()>;

void AddDoctorCommand(CLI::App& app, Action* action);
void AddBenchIoCommand(CLI::App& bench, Action* action);
void AddBenchStepCommand(CLI::App& bench, Action* action);
// Defined in bench_adam_cmd.cc (issue 3).
void AddBenchAdamCommand(CLI::App& bench, Action* action);
// Defined in bench_kernels_cmd.cc (issue 16): `bench init` and `bench accumulate`.
void AddBenchKernelCommands(CLI::App& bench, Action* action);
// `bench tune` (bench_tune_cmd.cc) and `bench links` (bench_links_cmd.cc), issue 18.
void AddBenchTuneCommand(CLI::App& bench, Action* action);
void AddBenchLinksCommand(CLI::App& bench, Action* action);

void AddTrainCommand(CLI::App& app, Action* action);
// `strata config check`, `strata export`, `strata estimate` (issue 5).
void AddConfigCommand(CLI::App& app, Action* action);
void AddExportCommand(CLI::App& app, Action* action);
void AddEstimateCommand(CLI::App& app, Action* action);
// `strata generate` (issue 17).
void AddGenerateCommand(CLI::App& app, Action* action);

// The built-in default job that `strata` runs with no arguments: the tiny model, 2 local
// ranks, parameters and optimizer states on NVMe (configs/tiny_cpu.json).
int RunDefaultTraining();

// This process's command line (for the local launcher, which re-executes it per rank).
void SetCurrentArgv(int argc, char** argv);
const std::vector<std::string>& CurrentArgv();

}  // namespace strata::cli
