// `strata bench io` (one setting, or --sweep) and `strata bench step`.
#include "bench/bench_util.h"
#include "bench/io_bench.h"
#include "bench/io_point.h"
#include "bench/io_sweep.h"
#include "bench/step_bench.h"
#include "src/cli/default_config.h"
#include "src/cli/commands.h"
#include "src/cli/stop_on_signal.h"
#include "strata/log.h"

namespace strata::cli {

namespace {

// Flags only the sweep reads; the shared ones (--dir, --size, --rounds, ...) take the sweep's
// own defaults unless given.
struct SweepFlags {
  bool on = false;
  std::string out = "strata-bench-io";
  std::vector<std::string> blocks = {"128K", "256K", "512K", "1M", "2M", "4M", "8M"};
  std::vector<unsigned> queue_depths = {1, 4, 16, 64};
  double refine_s = bench::SweepOptions().refine_s;
};

int RunSweep(const bench::IoBenchOptions& io, const SweepFlags& flags, const CLI::App& cmd) {
  bench::SweepOptions o;
  o.dir = io.dir;
  o.checksums = io.checksums;
  o.run_fio = io.run_fio;
  o.engine = bench::EngineKindFromName(io.engine);
  if (cmd.count("--size")) o.size = io.size;
  if (cmd.count("--rounds")) o.rounds = io.rounds;
  o.blocks.clear();
  for (const std::string& b : flags.blocks) {
    auto v = bench::ParseBytes(b, "--blocks");
    if (!v.ok()) return LogError("{}", v.status().message()), 2;
    o.blocks.push_back(static_cast<uint32_t>(*v));
  }
  o.queue_depths = flags.queue_depths;
  o.refine_s = flags.refine_s;
  return bench::RunIoSweep(o, flags.out);
}

}  // namespace

void AddBenchIoCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("io", "NVMe tier sequential write/read vs fio (io_uring) on the same file size, "
                                         "block size and queue depth; pinned memcpy bandwidth; --sweep: a grid of "
                                         "block sizes x queue depths as CSV, JSON and an SVG picture");
  auto opts = std::make_shared<bench::IoBenchOptions>();
  auto sweep = std::make_shared<SweepFlags>();
  auto size = std::make_shared<std::string>("2G");
  auto block = std::make_shared<std::string>("1M");
  cmd->add_option("--dir", opts->dir, "folder for the swap file (on the drive to measure)")->capture_default_str();
  cmd->add_option("--size", *size, "bytes written and read per pass (K/M/G suffixes; --sweep: 256M)")->capture_default_str();
  cmd->add_option("--block", *block, "bytes per request (aio block_size)")->capture_default_str();
  cmd->add_option("--qd", opts->queue_depth, "requests in flight (aio queue_depth)")->capture_default_str();
  cmd->add_option("--rounds", opts->rounds, "interleaved repetitions (--sweep: rounds over the whole grid, 2)")->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--engine", opts->engine, "auto | uring | pread")->capture_default_str()
      ->check(CLI::IsMember({"auto", "uring", "pread"}));
  cmd->add_flag("--no-checksum{false}", opts->checksums, "skip the per-tensor xxh3 (on by default)");
  cmd->add_flag("--no-fio{false}", opts->run_fio, "do not run fio");
  cmd->add_flag("--small-pages", opts->small_pages, "the store's buffers in 4 KiB pages instead of huge pages "
                                                   "(shows what huge pages are worth on this disk)");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->add_flag("--sweep", sweep->on, "every block size x queue depth x read/write, the store and fio (--fixedbufs "
                "--registerfiles) interleaved at each point; 256 MiB per pass and 2 rounds unless --size/--rounds "
                "say otherwise, then the best settings again for --refine-s (about 3.5 minutes here); writes "
                "io_sweep.csv, .json and .svg into --out");
  cmd->add_option("--refine-s", sweep->refine_s, "--sweep: seconds re-measuring the best settings after the grid "
                  "rounds (0: none)")->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--out", sweep->out, "--sweep: folder for the CSV, JSON and SVG")->capture_default_str();
  cmd->add_option("--blocks", sweep->blocks, "--sweep: block sizes (multiples of 4K dividing 16M)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--qds", sweep->queue_depths, "--sweep: queue depths")->delimiter(',')->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->callback([=] {
    *action = [=] {
      auto s = bench::ParseBytes(*size, "--size");
      auto b = bench::ParseBytes(*block, "--block");
      if (!s.ok() || !b.ok()) {
        LogError("{}", (!s.ok() ? s.status() : b.status()).message());
        return 2;
      }
      opts->size = *s;
      opts->block = static_cast<uint32_t>(*b);
      StopOnSignals();  // Ctrl-C removes the swap folder (the test file and fio's with it)
      if (sweep->on) return RunSweep(*opts, *sweep, *cmd);
      if (opts->size < opts->tensor_bytes) opts->tensor_bytes = (opts->size / opts->block) * opts->block;
      return bench::RunIoBench(*opts);
    };
  });
}

void AddBenchStepCommand(CLI::App& bench, Action* action) {
  auto* cmd = bench.add_subcommand("step", "training step time with offload none / cpu / nvme side by side (1 rank)");
  auto opts = std::make_shared<bench::StepBenchOptions>();
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "ds_config.json (default: the built-in tiny config)");
  cmd->add_option("--steps", opts->steps, "measured steps per mode")->capture_default_str()->check(CLI::Range(1, 10000));
  cmd->add_option("--set", opts->sets, "override a config key");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->add_option("--fake-device", opts->fake_device_gbps, "compare the synchronous and the overlapped schedule on "
                  "the fake asynchronous device, its host<->device copies modelled at this many GB/s")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--optimizer-overlap", opts->optimizer_overlap, "compare the plain schedule (the optimizer after "
                "the backward) with the optimizer overlapping the next forward (strata.optimizer_overlap \"forward\") "
                "and also the backward (\"speculative\"); with the working weights on NVMe also the one-step delayed update "
                "(\"delayed\", not the same arithmetic)");
  cmd->add_flag("--vs-libtorch", opts->vs_libtorch, "compare plain LibTorch training of the same model in memory "
                "(one module, autograd's graph kept, torch::optim::AdamW; fp32) with Strata on this config");
  cmd->add_option("--peak-tflops", opts->peak_tflops, "the device's peak for MFU (default: its stated dense bf16/fp16 "
                                                      "or fp32 peak; none on a CPU)")->check(CLI::Range(0.0, 1e6));
  cmd->callback([=] {
    *action = [=] {
      opts->config_path = *config;
      opts->default_config_json = kDefaultConfigJson;
      StopOnSignals();  // Ctrl-C removes the engines' swap folders
      return bench::RunStepBench(*opts);
    };
  });
}

}  // namespace strata::cli
