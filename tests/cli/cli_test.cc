// The user-facing subcommands end to end: config check (resolved values, "auto", warnings,
// errors with exit 1), estimate, train --metrics / progress summary, export.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/cli_run.h"
#include "support/temp_dir.h"

namespace strata {
namespace {
using testing::RunStrata;

const std::string kDs = STRATA_SOURCE_DIR "/tests/config/ds_configs/";

TEST(Cli, ConfigCheckPrintsTheResolvedConfigAutosAndWarnings) {
  auto r = RunStrata("config check " + kDs + "hf_trainer_zero3_auto.json --nproc 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"train_batch_size\": 16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train_batch_size = 16  (micro-batch x accumulation steps x 2 ranks)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("scheduler.params.warmup_max_lr = 0.001  (the optimizer's lr)"), std::string::npos) << r.out;

  testing::TempDir dir;
  const std::string bad = dir.path() + "/bad.json";
  std::ofstream(bad) << R"({"gradient_clipings": 1.0, "train_batch_size": 16})";
  r = RunStrata("config check " + bad + " --nproc 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: config key 'gradient_clipings' is not used"), std::string::npos) << r.out;
  r = RunStrata("config check " + bad + " --nproc 3");  // 16 is not divisible by 3 ranks
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("train_batch_size 16 is not divisible by 3"), std::string::npos) << r.out;
  r = RunStrata("config check " + bad + " --set zero_optimization.stage=5");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("zero_optimization.stage: 5 is out of range [0, 3]"), std::string::npos) << r.out;
  r = RunStrata("config check " + bad + " --set bf16.enabled=yes");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("bf16.enabled: expected true, false or \"auto\""), std::string::npos) << r.out;
}

// DeepSpeed's legacy cpu_offload means offload_optimizer.device "cpu" there, and here.
TEST(Cli, ConfigCheckReadsDeepSpeedsLegacyCpuOffload) {
  testing::TempDir dir;
  const std::string legacy = dir.path() + "/legacy.json";
  std::ofstream(legacy) << R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": true},
                               "activation_checkpointing": {"partition_activations": true}})";
  auto r = RunStrata("config check " + legacy);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t opt = r.out.find("\"offload_optimizer\"");
  ASSERT_NE(opt, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"device\": \"cpu\"", opt), r.out.find("\"device\"", opt)) << r.out;
  EXPECT_NE(r.out.find("zero_optimization.cpu_offload: true read as zero_optimization.offload_optimizer.device = "
                       "\"cpu\" (deprecated in DeepSpeed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("activation_checkpointing: each block recomputed from its saved input"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("'activation_checkpointing' is not used"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("'zero_optimization.cpu_offload' is not used"), std::string::npos) << r.out;
}

// bench step --vs-libtorch: the plain LibTorch anchor and Strata side by side (fp32 only).
TEST(Cli, BenchStepAgainstPlainLibTorch) {
  testing::TempDir dir;
  const std::string small = " --steps 1 --set strata.model.n_layer=1 --set strata.model.d_model=32 --set "
                            "zero_optimization.offload_param.device=none --set "
                            "zero_optimization.offload_optimizer.device=none --set "
                            "zero_optimization.offload_param.nvme_path=" + dir.path();
  auto r = RunStrata("bench step --vs-libtorch --json --set bf16.enabled=false" + small);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"libtorch\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"ratio_vs_libtorch\""), std::string::npos) << r.out;
  r = RunStrata("bench step --vs-libtorch --set bf16.enabled=true" + small);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("the LibTorch reference trains in fp32"), std::string::npos) << r.out;
}

// bench io: the store's write, read, and both at once, beside fio's (null when fio is absent).
TEST(Cli, BenchIoReportsReadsAndWritesAtOnce) {
  testing::TempDir dir;
  auto r = RunStrata("bench io --json --size 256M --rounds 1 --dir " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* key : {"\"write_gbps\"", "\"read_gbps\"", "\"read_write_at_once_gbps\"",
                          "\"fio_fixed_read_write_at_once_gbps\"", "\"read_write_at_once_ratio_vs_fio_fixed\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out;
  r = RunStrata("bench io --size 128M --rounds 2 --no-fio --dir " + dir.path());  // (odd rounds too)
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("read + write at once"), std::string::npos) << r.out;
}

// An fio on PATH that does not start (on the GPU machine its shared libraries were missing):
// bench io and bench links measure the tier and leave fio's anchor out, with a warning.
TEST(Cli, BenchesGoOnWithoutAnFioThatDoesNotStart) {
  testing::TempDir dir;
  const std::string bin = dir.path() + "/bin";
  std::filesystem::create_directories(bin);
  {
    std::ofstream fio(bin + "/fio");
    fio << "#!/bin/sh\necho 'fio: error while loading shared libraries: libtirpc.so.3' >&2\nexit 127\n";
  }
  std::filesystem::permissions(bin + "/fio", std::filesystem::perms::owner_all);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (bin + ":" + path).c_str(), 1);
  auto io = RunStrata("bench io --json --size 128M --rounds 1 --dir " + dir.path());
  auto links = RunStrata("bench links --json --nvme-size 64M --copy-size 16M --rounds 1 --dir " + dir.path());
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_EQ(io.exit_code, 0) << io.out;
  EXPECT_NE(io.out.find("\"write_gbps\""), std::string::npos) << io.out;
  EXPECT_NE(io.out.find("does not start"), std::string::npos) << io.out;
  ASSERT_EQ(links.exit_code, 0) << links.out;
  EXPECT_NE(links.out.find("NVMe read via the tier"), std::string::npos) << links.out;
}

// A slow start-up says what it is doing (here made to report at once).
TEST(Cli, StartUpReportsItsPhase) {
  testing::TempDir dir;
  ::setenv("STRATA_STARTUP_QUIET_S", "0", 1);
  auto r = RunStrata("train --steps 1 --set strata.model.n_layer=1 --set strata.model.d_model=32 --set "
                     "zero_optimization.offload_param.nvme_path=" + dir.path() +
                     " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path());
  ::unsetenv("STRATA_STARTUP_QUIET_S");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("start-up: reading the token data (0 s so far)"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("start-up: "), r.out.find("strata train: ")) << r.out;
  EXPECT_NE(r.out.find("evaluation: 8 held-out batch(es)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval  step     1"), std::string::npos) << r.out;
  // eval_interval 0: no evaluation at all (it used to run at the start and the end).
  r = RunStrata("train --steps 1 --set strata.eval_interval=0 --set strata.model.n_layer=1 --set "
                "strata.model.d_model=32 --set zero_optimization.offload_param.nvme_path=" + dir.path() +
                " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("evaluation: none"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("eval  step"), std::string::npos) << r.out;
  // strata.host_blocks auto: a tiny model's blocks all fit in host memory, and it says so.
  r = RunStrata("train --steps 1 --set strata.eval_interval=0 --set strata.model.n_layer=1 --set "
                "strata.model.d_model=32 --set strata.host_blocks=auto --set "
                "zero_optimization.offload_param.nvme_path=" + dir.path() +
                " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("strata.host_blocks auto: every block kept in host memory"),
            std::string::npos) << r.out;
}

TEST(Cli, EstimatePrintsTiersAndTheVerdict) {
  auto r = RunStrata("estimate --config " STRATA_SOURCE_DIR "/configs/tiny_cpu.json --nproc 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fits this machine: yes"), std::string::npos) << r.out;
  // The master's row: its own tensor with bf16 compute, the working weights with fp32 compute
  // (bf16.enabled "auto" picks either, by the CPU: each is asked for here).
  for (const char* bf16 : {"true", "false"}) {
    r = RunStrata(std::string("estimate --config " STRATA_SOURCE_DIR "/configs/tiny_cpu.json --set bf16.enabled=") + bf16);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(bf16 == std::string("true") ? "fp32 master weights" : "fp32 master (= working)"),
              std::string::npos) << r.out;
  }
  r = RunStrata("estimate --params 1e15 --nproc 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fits this machine: no"), std::string::npos) << r.out;
  // train refuses the same before allocating.
  r = RunStrata("train --steps 1 --set strata.model.n_layer=5000 --set strata.model.d_model=8192 "
                "--set strata.model.n_head=64");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("does not fit this machine"), std::string::npos) << r.out;
  // Planning for another machine: its host memory and disk instead of this one's. With 2 GB
  // of host memory and 1 TB of disk, fp32 gradient accumulators (4 B/param in host memory)
  // bound the model, so --max takes bf16 ones and says so.
  r = RunStrata("estimate --config " STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json --set strata.data.path= "
                "--set train_micro_batch_size_per_gpu=1 --set strata.model.seq_len=128 --host-memory 2G --disk-free 1T "
                "--max");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("the planned node (1 rank(s)): host memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2.15 GB available"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits the planned machine: no"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with strata.gradient_accumulator bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("free NVMe 1099.51 GB"), std::string::npos) << r.out;
  // (Larger or not depends on the compute dtype "auto" picks here: fp32 compute sizes the pinned
  // buffers by m and v, bf16 compute by the fp32 master.)
  EXPECT_NE(r.out.find("compressed Adam moments (opt-in"), std::string::npos) << r.out;
  // What does not fit as given but would with bf16 gradient accumulators is told so.
  r = RunStrata("estimate --config " STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json --set strata.data.path= "
                "--set strata.model.n_layer=80 --set train_micro_batch_size_per_gpu=1 --set strata.model.seq_len=512 "
                "--set bf16.enabled=true --set strata.schedule=micro_batch --host-memory 21G --disk-free 70G");  // (auto would follow the CPU's ISA)
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fits the planned machine: no"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits with --set strata.gradient_accumulator=bf16: host memory"), std::string::npos) << r.out;
  // A disk too small for the states (69 GB as given, 48 GB free) beside ample host memory: host
  // blocks (lossless) are the advice, and --max keeps some blocks' states in host memory too,
  // telling what compressed moments would hold beside it.
  const std::string small_disk = "estimate --config " STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json --set "
                                 "strata.data.path= --set strata.model.n_layer=80 --set train_micro_batch_size_per_gpu=1 "
                                 "--set strata.model.seq_len=512 --set bf16.enabled=true --set strata.schedule=micro_batch "
                                 "--disk-free 45G ";
  r = RunStrata(small_disk + "--host-memory 64G --max");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fits with --set strata.host_blocks=auto: host memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in host memory: strata.host_blocks auto)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with compressed Adam moments (opt-in, they round m and v): "), std::string::npos) << r.out;
  // States in host memory too small for fp32 or bf16 m and v beside bf16 accumulators, not for 8-bit ones.
  r = RunStrata(small_disk + "--host-memory 44G --set zero_optimization.offload_optimizer.device=cpu "
                "--set strata.gradient_accumulator=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fits with --set strata.adam_states=8bit: host memory"), std::string::npos) << r.out;
  // Optimizer states on NVMe: how many blocks host memory has room for, and "auto" takes them.
  const std::string planned = "estimate --config " STRATA_SOURCE_DIR "/configs/llama_1b_nvme.json --set "
                              "strata.data.path= --set train_micro_batch_size_per_gpu=1 --set strata.model.seq_len=128 "
                              "--host-memory 12G --disk-free 1T --set bf16.enabled=true --set strata.schedule=micro_batch";  // (not the CPU's ISA)
  r = RunStrata(planned);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("blocks kept in host memory: room for the first "), std::string::npos) << r.out;
  // What a step moves through the disk (tests/engine/step_traffic_test.cc checks the figures).
  EXPECT_NE(r.out.find("NVMe traffic per step (per rank): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("when the next forward finds the update's writes in flight"), std::string::npos) << r.out;
  r = RunStrata(planned + " --set strata.host_blocks=auto");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("blocks in host memory: strata.host_blocks auto)"), std::string::npos) << r.out;
  // For a GPU: what a step copies over the link, gradients summed on the device ("auto") or not.
  const std::string gpu = "estimate --config " STRATA_SOURCE_DIR "/configs/llama_7b_gpu.json --device cuda "
                          "--device-memory 80G --host-memory 128G --disk-free 60G";
  r = RunStrata(gpu);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("gradients summed on the device, copied out once per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device link per step (per rank): 13.48 GB in (working weights), 26.95 GB out"),
            std::string::npos) << r.out;
  r = RunStrata(gpu + " --set strata.device_accumulation=false");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("431.26 GB out (gradients)"), std::string::npos) << r.out;  // 16 micro-batches' worth
  r = RunStrata("estimate --host-memory lots");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--host-memory"), std::string::npos) << r.out;
}

// A machine without host memory or free disk is no machine (0 also meant "unknown" to the fit
// check: --max found a 10^15-parameter model "fitting"), and a parameter count that is no
// number, negative or beyond 10^15 used to be dropped for the config's own model: each is an
// error naming the flag.
TEST(Cli, EstimateRefusesAnImpossibleMachineOrModelSize) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"--max --host-memory 0", "--host-memory 0: a machine with no host memory"},
                        Case{"--max-seq --host-memory 0", "--host-memory 0: a machine with no host memory"},
                        Case{"--disk-free 0", "--disk-free 0: a machine with no free disk"},
                        Case{"--device cuda --device-memory 0", "--device-memory 0: a machine with no GPU memory"},
                        Case{"--params nan", "--params nan: must be a number of parameters from 1e+03 to 1e+15"},
                        Case{"--params -1e9", "--params -1000000000: must be a number of parameters"},
                        Case{"--params 1e30", "--params 1e+30: must be a number of parameters"},
                        Case{"--params 0", "--params 0: must be a number of parameters"}}) {
    auto r = RunStrata(std::string("estimate ") + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
  auto r = RunStrata("estimate --params 1e3");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("0.000998 M parameters"), std::string::npos) << r.out;  // (each block rounded)
}

// --max-seq used to try lengths past the longest Strata accepts (and past the model's own
// max_positions), aborting on an internal check; it stops at the limit and says so.
TEST(Cli, EstimateMaxSeqStopsAtTheLongestSequenceStrataAccepts) {
  auto r = RunStrata("estimate --max-seq --host-memory 100T --set strata.model.seq_len=1048576");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.signal, 0) << r.out;
  EXPECT_NE(r.out.find("1048576 tokens (1024.0 K)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1048576 tokens is the longest sequence Strata accepts"), std::string::npos) << r.out;
  r = RunStrata("estimate --max-seq --host-memory 100T --set strata.model.max_positions=4096");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("4096 tokens (4.0 K)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seq_len = 4097 exceeds max_positions = 4096"), std::string::npos) << r.out;
}

// "494.8 kB", "7.66 MB", "1.02 GB", "512 B" (HumanBytes) -> bytes.
double ParseHumanBytes(const std::string& number, const std::string& unit) {
  const double scale = unit == "GB" ? 1e9 : unit == "MB" ? 1e6 : unit == "kB" ? 1e3 : 1;
  return std::stod(number) * scale;
}

// A real run of the shipped tiny config (2 ranks) against the estimator, split by what may
// differ between machines of this kind:
// - what the engine allocates (its ledger) equals the estimate exactly, tier by tier;
// - page-locked bytes and swap files are what Strata itself locks and writes: within 10%;
// - the host peak also holds what LibTorch pages in for this CPU and dtype (its kernels,
//   workspaces and allocator caches differ between ISAs), so it is only bounded: at least
//   the engine's own resident state, at most 1.5x the estimate.
TEST(Cli, TheTinyRunMeasuresWhatTheEstimatorPredicts) {
  testing::TempDir dir;
  auto r = RunStrata("train --nproc 2 --steps 5 --set strata.eval_batches=1 "
                     "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
                     " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string bytes = R"(([0-9.]+) (B|kB|MB|GB))";
  const std::regex ledger("the engine's ledger\\): device " + bytes + " \\(estimated " + bytes + "\\), cpu " + bytes +
                          " \\(estimated " + bytes + "\\), nvme " + bytes + " \\(estimated " + bytes + "\\)");
  std::smatch l;
  ASSERT_TRUE(std::regex_search(r.out, l, ledger)) << r.out;
  for (int tier = 0; tier < 3; ++tier)
    EXPECT_EQ(l[1 + 4 * tier].str() + l[2 + 4 * tier].str(), l[3 + 4 * tier].str() + l[4 + 4 * tier].str())
        << l[0].str();
  const double resident = ParseHumanBytes(l[1], l[2]) + ParseHumanBytes(l[5], l[6]);

  const std::regex line("measured over the run: host peak " + bytes + " \\(estimated " + bytes +
                        R"(, [-+0-9.]+%\); page-locked .*\(estimated .*, ([-+0-9.]+)%\); )"
                        R"(swap files .*\(estimated .*, ([-+0-9.]+)%\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
  const double host = ParseHumanBytes(m[1], m[2]), host_estimate = ParseHumanBytes(m[3], m[4]);
  EXPECT_GE(host, resident) << m[0].str();
  EXPECT_LE(host, 1.5 * host_estimate) << m[0].str();
  EXPECT_LE(std::abs(std::stod(m[5].str())), 10.0) << m[0].str();
  EXPECT_LE(std::abs(std::stod(m[6].str())), 10.0) << m[0].str();
}

// On a device that pins as cudaHostRegister does (the fake device registers its pinned
// memory without mlock, so the kernel's VmLck stays 0), the page-locked figure is still what
// Strata locked: the first GPU run reported "page-locked 0 B (estimated 3.64 GB, +inf%)".
// With device accumulation the fp32 accumulators are pinned too (Note [Sums straight into
// the accumulators]), and the estimate says so.
TEST(Cli, PageLockedMemoryIsMeasuredWhereverTheDevicePinsIt) {
  testing::TempDir dir;
  for (const std::string extra : {"", " --set gradient_accumulation_steps=3 --set strata.device_accumulation=true"}) {
    SCOPED_TRACE(extra);
    auto r = RunStrata("train --steps 2 --set strata.device=fake --set strata.eval_batches=1 "
                       "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
                       " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path() + extra);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(page-locked ([0-9.]+) (B|kB|MB|GB) \(estimated ([0-9.]+) )"
                                                       R"((B|kB|MB|GB), ([-+0-9.]+)%\))")))
        << r.out;
    EXPECT_GT(ParseHumanBytes(m[3], m[4]), 0) << m[0].str();
    EXPECT_LE(std::abs(std::stod(m[5].str())), 10.0) << m[0].str();
    EXPECT_EQ(r.out.find("inf%"), std::string::npos) << r.out;
  }
}

TEST(Cli, TrainWritesMetricsAndASummaryAndExportLoadsBack) {
  testing::TempDir dir;
  const std::string metrics = dir.path() + "/m.jsonl", ck = dir.path() + "/ck";
  auto r = RunStrata("train --steps 3 --set strata.model.n_layer=1 --set strata.model.d_model=32 "
                     "--set strata.eval_batches=1 --set steps_per_print=2 --set wall_clock_breakdown=true "
                     "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
                     " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path() + " --metrics " + metrics +
                     " --save " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("train step     2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TFLOPS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[compute "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary: 3 steps"), std::string::npos) << r.out;
  std::ifstream in(metrics);
  std::string line;
  int n = 0;
  int evals = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) {  // at the start and at the end
      EXPECT_EQ(j["step"], evals++ == 0 ? 0 : 3) << line;
      continue;
    }
    EXPECT_EQ(j["step"], n);
    for (const char* k : {"loss", "lr", "grad_norm", "tokens_per_s", "tflops", "exposed_io_s", "nvme_read_bytes"})
      EXPECT_TRUE(j.contains(k)) << k;
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(evals, 2);
  r = RunStrata("export " + ck + " --out " + dir.path() + "/m.safetensors --dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("(step 3)"), std::string::npos) << r.out;
  r = RunStrata("export " + dir.path() + "/nothing --out " + dir.path() + "/x.safetensors");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
}

// The same property as Checkpoint.ResumeAfterNSteps..., end to end: 2 local ranks over the
// TCP ring, a resume from the command line, compared through the exported fp32 weights.
// Epochs that end the run before the decaying schedule does are said, with the value to set.
TEST(Cli, EpochsEndingBeforeTheScheduleAreWarnedAbout) {
  testing::TempDir dir;
  const std::string text = dir.path() + "/t.txt";
  testing::WriteBytes(text, std::string(6000, 'a') + std::string(6000, 'b'));
  auto r = RunStrata("train --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.eval_interval=0 "
                     "--set strata.data.path=" + text + " --set strata.data.epochs=1 "
                     "--set zero_optimization.offload_param.device=cpu --set zero_optimization.offload_optimizer.device=cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("strata.data.epochs 1 ends the run after 11 steps, before scheduler.params.total_num_steps 300"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary: 11 steps"), std::string::npos) << r.out;
}

TEST(Cli, ResumeFromTheCommandLineEqualsUninterruptedTrainingBitwise) {
  testing::TempDir dir;
  const std::string common = "train --nproc 2 --set strata.model.n_layer=1 --set strata.model.d_model=32 "
                             "--set strata.eval_batches=1 --set zero_optimization.offload_param.nvme_path=" +
                             dir.path() + " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path();
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  ASSERT_EQ(RunStrata(common + " --steps 4 --save " + a).exit_code, 0);
  ASSERT_EQ(RunStrata(common + " --steps 2 --save " + b).exit_code, 0);
  auto resumed = RunStrata(common + " --steps 4 --resume " + b + " --save " + b);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at step 2"), std::string::npos) << resumed.out;
  ASSERT_EQ(RunStrata("export " + a + " --out " + a + ".safetensors").exit_code, 0);
  ASSERT_EQ(RunStrata("export " + b + " --out " + b + ".safetensors").exit_code, 0);
  std::ifstream fa(a + ".safetensors", std::ios::binary), fb(b + ".safetensors", std::ios::binary);
  const std::string ba((std::istreambuf_iterator<char>(fa)), {}), bb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_GT(ba.size(), 100000u);
  EXPECT_TRUE(ba == bb) << "exports of 4 uninterrupted steps and of 2 + 2 resumed steps differ";
}

// torchrun-style launch (one process per rank, no launcher): a rank that dies makes the
// other exit at once naming it; a rank that hangs (SIGSTOP) makes it exit after
// strata.comm_timeout_s, never wait forever.
TEST(Cli, ADeadOrHungRankMakesTheOthersExitWithAClearError) {
  testing::TempDir dir;
  for (const int sig : {SIGKILL, SIGSTOP}) {
    const std::string port = std::to_string(29700 + sig);
    const std::string args = " train --steps 100000 --set strata.model.n_layer=1 --set strata.comm_timeout_s=3 "
                             "--set zero_optimization.offload_param.nvme_path=" + dir.path() +
                             " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path();
    const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
    const pid_t victim = fork();
    if (victim == 0) {
      ::execl("/bin/sh", "sh", "-c", ("RANK=1 " + env + " exec " STRATA_BINARY + args + " >/dev/null 2>&1").c_str(),
              nullptr);
      _exit(127);
    }
    bool hit = false;
    const auto r = testing::RunStrataWatching(args, [&](const std::string& out, pid_t) {
      if (!hit && out.find("train step    10") != std::string::npos) {  // both ranks are training
        hit = true;
        ::kill(victim, sig);
      }
    }, "RANK=0 " + env);
    const std::string& out = r.out;
    ::kill(victim, SIGKILL);
    ::waitpid(victim, nullptr, 0);
    ASSERT_TRUE(hit) << out;
    EXPECT_EQ(r.exit_code, 1) << out;
    EXPECT_NE(out.find(sig == SIGKILL ? "rank 1 closed the connection" : "timed out after 3000 ms"), std::string::npos)
        << out;
  }
}

// Node-local --save folders (each "node" a folder of its own, as without a shared file
// system): found at start-up, before any step, naming the folder and the rank that does not
// see it, where the first save used to fail after the first interval of training.
TEST(Cli, ASaveFolderTheRanksDoNotShareIsRefusedAtStartUp) {
  testing::TempDir dir;
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29833";
  auto args = [&](const std::string& node) {
    return " train --steps 20 --set strata.model.n_layer=1 --set strata.comm_timeout_s=20 --set "
           "zero_optimization.offload_param.nvme_path=" + dir.path() + "/" + node +
           " --set zero_optimization.offload_optimizer.nvme_path=" + dir.path() + "/" + node + " --save " +
           dir.path() + "/" + node + "/ckpt";
  };
  const std::string node_b = dir.path() + "/node_b.log";
  const pid_t other = fork();
  if (other == 0) {
    ::execl("/bin/sh", "sh", "-c", ("RANK=1 " + env + " exec " STRATA_BINARY + args("b") + " >" + node_b + " 2>&1").c_str(),
            nullptr);
    _exit(127);
  }
  const auto r = testing::RunStrataWatching(args("a"), [](const std::string&, pid_t) {}, "RANK=0 " + env);
  int status = 0;
  ::waitpid(other, &status, 0);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("--save '" + dir.path() + "/a/ckpt' is not one folder that every rank shares: rank(s) 1 of 2"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("train step"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/a/ckpt")) << "the folder this run created is removed";
  std::ifstream b(node_b);
  const std::string b_out((std::istreambuf_iterator<char>(b)), {});
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << b_out;
  EXPECT_NE(b_out.find("rank 1: --save '" + dir.path() + "/b/ckpt' here is not the folder rank 0 saves into"),
            std::string::npos)
      << b_out;
}

}  // namespace
}  // namespace strata
