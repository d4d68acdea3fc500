// `strata bench adam`: the CPU AdamW against the memory roofline and its peers (issue 3).
#include <memory>

#include "bench/adam_bench.h"
#include "src/cli/commands.h"

namespace strata::cli {

void AddBenchAdamCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("adam", "CPU AdamW (fp32, and with the fused bf16 copy), Lion, Adagrad, LAMB and Muon vs "
                                           "their memory rooflines, STREAM triad, LibTorch's AdamW and DeepSpeed's "
                                           "CPU Adam, Lion and Adagrad");
  auto opts = std::make_shared<bench::AdamBenchOptions>();
  cmd->add_option("--params", opts->params, "parameters N (elements per array)")->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 34));
  cmd->add_option("--threads", opts->threads, "OpenMP threads for every variant")->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--rounds", opts->rounds, "interleaved repetitions")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("--python", opts->python, "Python for the DeepSpeed peer (default: $STRATA_PYTHON or .venv/bin/python)");
  // A binary run away from its source tree (the GPU machine) names the script where it is.
  cmd->add_option("--deepspeed-script", opts->deepspeed_script,
                  "bench/deepspeed_adam.py for the DeepSpeed peer (default: the source tree's)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--no-libtorch{false}", opts->libtorch, "skip LibTorch's AdamW");
  cmd->add_flag("--no-deepspeed{false}", opts->deepspeed, "skip DeepSpeed's CPU Adam");
  cmd->add_flag("--no-onednn{false}", opts->onednn, "skip the oneDNN reorder/norm comparison");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->callback([=] { *action = [=] { return bench::RunAdamBench(*opts); }; });
}

}  // namespace strata::cli
