// Nothing the user has is lost through the commands' own surfaces: a used save folder, an
// export over a model folder or into the checkpoint it reads, generate's reading of a
// checkpoint, the runs that train nothing, telemetry on a full disk, a full disk under an
// export, input files that are FIFOs or nest without end, and a model spelled two ways on
// resume. Each test runs the real binary, as a user would.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "support/cli_run.h"
#include "support/small_disk.h"
#include "support/temp_dir.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using testing::RunStrata;

// A tiny run whose swap files stay in the test's folder.
std::string Train(const std::string& dir, const std::string& more) {
  return "train --set strata.model.n_layer=1 --set strata.model.d_model=32 --set strata.model.seq_len=32 "
         "--set strata.eval_batches=1 --set train_micro_batch_size_per_gpu=2 --set steps_per_print=1 "
         "--set zero_optimization.offload_param.nvme_path=" + dir + " --set zero_optimization.offload_optimizer.nvme_path=" +
         dir + " " + more;
}

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Every file below `dir` with its bytes: what "untouched" means.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = Read(e.path().string());
  return files;
}

bool Has(const testing::CliRun& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

TEST(NothingLost, AFreshRunRefusesASaveFolderHoldingAnotherRunsCheckpoints) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  auto first = RunStrata(Train(dir.path(), "--steps 4 --save " + ck + " --save-interval 2"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const auto before = Snapshot(ck);
  auto second = RunStrata(Train(dir.path(), "--steps 6 --save " + ck + " --save-interval 2 --seed 7"));
  EXPECT_EQ(second.exit_code, 1) << second.out;
  EXPECT_TRUE(Has(second, "--save '" + ck + "' holds the checkpoints of another run (2 step folder(s), the newest "
                          "step_00000004)")) << second.out;
  EXPECT_TRUE(Has(second, "--resume " + ck)) << second.out;
  EXPECT_EQ(Snapshot(ck), before);
  auto two_ranks = RunStrata(Train(dir.path(), "--nproc 2 --steps 6 --save " + ck));
  EXPECT_NE(two_ranks.exit_code, 0) << two_ranks.out;
  EXPECT_EQ(Snapshot(ck), before);
  // Continuing that run saves there; so does a run told to replace it.
  auto resumed = RunStrata(Train(dir.path(), "--steps 6 --save " + ck + " --save-interval 2 --resume " + ck));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
  auto from_step = RunStrata(Train(dir.path(), "--steps 8 --save " + ck + " --resume " + ck + "/step_00000006"));
  EXPECT_EQ(from_step.exit_code, 0) << from_step.out;
  auto forced = RunStrata(Train(dir.path(), "--steps 2 --save " + ck + " --seed 7 --overwrite"));
  EXPECT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_EQ(Read(ck + "/latest"), "step_00000002\n");
}

TEST(NothingLost, ExportNeverReplacesAFolderItDidNotWriteNorWritesIntoTheCheckpoint) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 1 --save " + ck)).exit_code, 0);
  // A Hugging Face folder as a user keeps it.
  const std::string model = dir.path() + "/my-model";
  fs::create_directories(model + "/original");
  std::ofstream(model + "/config.json") << "{\"model_type\": \"gpt2\"}";
  std::ofstream(model + "/LICENSE") << "keep me";
  std::ofstream(model + "/original/notes.txt") << "mine";
  const auto user_files = Snapshot(model);
  auto over = RunStrata("export " + ck + " --out " + model);
  EXPECT_EQ(over.exit_code, 1) << over.out;
  EXPECT_TRUE(Has(over, "which strata export did not write there: not replaced")) << over.out;
  EXPECT_EQ(Snapshot(model), user_files);
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"ck", "my-model"})) << "a temporary was left";
  // Into the checkpoint it reads: refused, the step intact (it still exports and resumes).
  const auto checkpoint = Snapshot(ck);
  for (const std::string& out : {ck + "/step_00000001/rank0.safetensors", ck + "/step_00000001", ck + "/export"}) {
    auto inside = RunStrata("export " + ck + " --out " + out);
    EXPECT_EQ(inside.exit_code, 1) << inside.out;
    EXPECT_TRUE(Has(inside, "lies inside the checkpoint folder")) << inside.out;
  }
  auto holding = RunStrata("export " + ck + "/step_00000001 --out " + ck + " --overwrite");
  EXPECT_EQ(holding.exit_code, 1) << holding.out;
  EXPECT_TRUE(Has(holding, "holds the checkpoint")) << holding.out;
  EXPECT_EQ(Snapshot(ck), checkpoint);
  // An earlier export is replaced; a user's folder only when told to.
  ASSERT_EQ(RunStrata("export " + ck + " --out " + dir.path() + "/hf").exit_code, 0);
  auto again = RunStrata("export " + ck + " --out " + dir.path() + "/hf --dtype bf16");
  EXPECT_EQ(again.exit_code, 0) << again.out;
  auto file = RunStrata("export " + ck + " --out " + dir.path() + "/w.safetensors");
  ASSERT_EQ(file.exit_code, 0) << file.out;
  EXPECT_EQ(RunStrata("export " + ck + " --out " + dir.path() + "/w.safetensors").exit_code, 0);
  auto forced = RunStrata("export " + ck + " --out " + model + " --overwrite");
  EXPECT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_FALSE(fs::exists(model + "/LICENSE"));
}

// --overwrite replaces the earlier run: its step folders (a crashed save's too) go once this
// run's first checkpoint is in place, so that pruning and `latest` see this run's steps alone
// (they used to stay: the newer foreign step outlived this run's own, pruned in its place); a
// run stopped before it saves leaves the earlier run's checkpoints as they were.
TEST(NothingLost, OverwriteRemovesTheEarlierRunsStepsOnceItSaves) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 4 --save " + ck + " --save-interval 2")).exit_code, 0);
  fs::create_directories(ck + "/step_00000006.tmp");  // a save the earlier run did not finish
  const auto earlier = Snapshot(ck);
  auto killed = RunStrata(Train(dir.path(), "--steps 2 --save " + ck + " --seed 7 --overwrite "
                                            "--set strata.debug_crash_in_save=shard_partly_written"));
  EXPECT_EQ(killed.signal, SIGKILL) << killed.out;
  auto after = Snapshot(ck);
  after.erase(".strata.lock");  // (the pid of its last holder)
  for (const auto& [name, bytes] : earlier) EXPECT_TRUE(name == ".strata.lock" || after[name] == bytes) << name;
  EXPECT_EQ(Read(ck + "/latest"), "step_00000004\n");  // (the killed save left its step_00000002.tmp: a SIGKILL)
  auto forced = RunStrata(Train(dir.path(), "--steps 2 --save " + ck + " --seed 7 --overwrite --save-interval 1"));
  ASSERT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_TRUE(Has(forced, "removed '" + ck + "/step_00000004', which another run had left")) << forced.out;
  EXPECT_EQ(testing::EntryNames(ck),
            (std::vector<std::string>{".strata.lock", "latest", "step_00000001", "step_00000002"}));
  EXPECT_EQ(Read(ck + "/latest"), "step_00000002\n");
  auto resumed = RunStrata(Train(dir.path(), "--steps 3 --save " + ck + " --seed 7 --resume " + ck));
  EXPECT_TRUE(Has(resumed, "at step 2")) << resumed.out;
}

// A run fine-tuned from an earlier export: exporting it back over that folder (its hf_source)
// used to replace it with exit 0, since an earlier export may be replaced; the base is now
// refused whoever wrote it, and replaced only when told.
TEST(NothingLost, ExportNeverReplacesTheFolderItsCheckpointWasTrainedFrom) {
  testing::TempDir dir;
  const std::string first = dir.path() + "/first", src = dir.path() + "/src", ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 1 --save " + first)).exit_code, 0);
  ASSERT_EQ(RunStrata("export " + first + " --out " + src).exit_code, 0);
  auto tuned = RunStrata(Train(dir.path(), "--steps 2 --save-interval 1 --init-from " + src + " --save " + ck));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.out;
  const auto base = Snapshot(src);
  for (const std::string& out : {src, src + "/", src + "/model.safetensors", dir.path() + "/./src"}) {
    auto over = RunStrata("export " + ck + " --out " + out);
    EXPECT_EQ(over.exit_code, 1) << over.out;
    EXPECT_TRUE(Has(over, "the base this checkpoint was trained from")) << over.out;
    EXPECT_EQ(Snapshot(src), base);
  }
  auto older = RunStrata("export " + ck + "/step_00000001 --out " + src);  // any step of that run
  EXPECT_EQ(older.exit_code, 1) << older.out;
  EXPECT_EQ(Snapshot(src), base);
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"ck", "first", "src"})) << "a temporary was left";
  auto told = RunStrata("export " + ck + " --out " + src + " --overwrite");
  EXPECT_EQ(told.exit_code, 0) << told.out;
  EXPECT_TRUE(Has(told, "-> " + src)) << told.out;
}

// A config.json that promises 4096 experts over weights of 4: the error names the first few
// problems and how many there are (it used to print 12,283 lines, one per missing tensor).
TEST(NothingLost, WeightsThatDoNotMatchTheConfigAreSummedUpNotListedInFull) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck", hf = dir.path() + "/hf";
  const std::string moe = "--set strata.model.arch=llama --set strata.model.hf_model_type=qwen3_moe "
                          "--set strata.model.qk_norm=true --set strata.model.moe.num_experts=4 "
                          "--set strata.model.moe.top_k=2 --set strata.model.moe.expert_ffn=16 ";
  ASSERT_EQ(RunStrata(Train(dir.path(), moe + "--steps 1 --save " + ck)).exit_code, 0);
  ASSERT_EQ(RunStrata("export " + ck + " --out " + hf).exit_code, 0);
  std::string config = Read(hf + "/config.json");
  const std::string four = "\"num_local_experts\": 4,";
  ASSERT_NE(config.find(four), std::string::npos) << config;
  config.replace(config.find(four), four.size(), "\"num_local_experts\": 4096,");
  std::ofstream(hf + "/config.json", std::ios::trunc) << config;
  auto r = RunStrata(Train(dir.path(), "--steps 1 --init-from " + hf));
  EXPECT_EQ(r.exit_code, 1) << r.out.substr(0, 3000);
  EXPECT_TRUE(Has(r, "12277 problem(s), 12276 missing tensor(s):")) << r.out.substr(0, 3000);
  EXPECT_TRUE(Has(r, "missing tensor 'model.layers.0.mlp.experts.4.gate_proj.weight'")) << r.out.substr(0, 3000);
  EXPECT_TRUE(Has(r, "\n  ... and 12269 more")) << r.out.substr(0, 3000);
  EXPECT_LT(std::count(r.out.begin(), r.out.end(), '\n'), 40) << r.out.substr(0, 3000);
}

TEST(NothingLost, AnExportOntoAFullDiskLeavesNoTemporary) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 1 --save " + ck)).exit_code, 0);
  testing::SmallDisk disk(dir.path() + "/disk", 32 << 10);  // the export needs ~150 KB
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  for (const std::string& out : {disk.path() + "/hf", disk.path() + "/w.safetensors"}) {
    auto full = RunStrata("export " + ck + " --out " + out);
    EXPECT_EQ(full.exit_code, 1) << full.out;
    EXPECT_TRUE(Has(full, "No space left on device")) << full.out;
    EXPECT_TRUE(testing::EntryNames(disk.path()).empty()) << testing::EntryNames(disk.path()).front();
  }
}

// A config.json nested 100,000 deep is refused where it is read (it used to be accepted by
// --init-from and crash export and generate later); a FIFO in place of a file is refused at
// once instead of hanging.
TEST(NothingLost, InputsThatCouldCrashOrHangAreRefusedNamingTheFile) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck", hf = dir.path() + "/hf";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 1 --save " + ck)).exit_code, 0);
  ASSERT_EQ(RunStrata("export " + ck + " --out " + hf).exit_code, 0);
  std::string config = Read(hf + "/config.json");
  config.insert(1, "\"notes\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  std::ofstream(hf + "/config.json", std::ios::trunc) << config;
  auto init = RunStrata(Train(dir.path(), "--steps 1 --init-from " + hf));
  EXPECT_EQ(init.exit_code, 1) << init.out.substr(0, 2000);
  EXPECT_TRUE(Has(init, hf + "/config.json': nested deeper than 64 levels")) << init.out.substr(0, 2000);
  auto exp = RunStrata("export " + ck + " --out " + dir.path() + "/again --hf-source " + hf);
  EXPECT_EQ(exp.signal, 0) << exp.out.substr(0, 2000);
  EXPECT_EQ(exp.exit_code, 1) << exp.out.substr(0, 2000);
  EXPECT_TRUE(Has(exp, "nested deeper than 64 levels")) << exp.out.substr(0, 2000);

  const std::string fifo = dir.path() + "/ds_config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto config_fifo = RunStrata("train --config " + fifo);  // would block in open() for a writer
  EXPECT_EQ(config_fifo.exit_code, 1) << config_fifo.out;
  EXPECT_TRUE(Has(config_fifo, "is a FIFO (named pipe), not a regular file")) << config_fifo.out;
  const std::string shard = hf + "/model-00001-of-00001.safetensors";
  fs::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  std::ofstream(hf + "/config.json", std::ios::trunc) << Read(dir.path() + "/again/config.json");
  fs::remove_all(dir.path() + "/again");
  ASSERT_EQ(RunStrata("export " + ck + " --out " + dir.path() + "/clean").exit_code, 0);
  std::ofstream(hf + "/config.json", std::ios::trunc) << Read(dir.path() + "/clean/config.json");
  auto shard_fifo = RunStrata(Train(dir.path(), "--steps 1 --init-from " + hf));
  EXPECT_EQ(shard_fifo.exit_code, 1) << shard_fifo.out;
  EXPECT_TRUE(Has(shard_fifo, "model-00001-of-00001.safetensors' is a FIFO")) << shard_fifo.out;
}

// generate reads a checkpoint's rank files directly: nothing is copied to $TMPDIR, even when it
// is stopped; a temperature that is no number is refused, a tiny one is greedy.
TEST(NothingLost, GenerateFromACheckpointWritesNothingAndRefusesABadTemperature) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck", hf = dir.path() + "/hf", tmp = dir.path() + "/tmp";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 2 --save " + ck)).exit_code, 0);
  ASSERT_EQ(RunStrata("export " + ck + " --out " + hf).exit_code, 0);
  fs::create_directories(tmp);
  const std::string env = "TMPDIR=" + tmp;
  auto run = [&](const std::string& args) { return testing::RunStrataWatching(args, [](auto&, pid_t) {}, env); };
  const std::string prompt = " --prompt 'On Monday' --max-new-tokens 12";
  auto from_ck = run("generate --model " + ck + prompt);
  ASSERT_EQ(from_ck.exit_code, 0) << from_ck.out;
  auto from_hf = run("generate --model " + hf + prompt);
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.out;
  EXPECT_EQ(from_ck.out, from_hf.out);
  EXPECT_TRUE(testing::EntryNames(tmp).empty());
  bool sent = false;
  auto stopped = testing::RunStrataWatching("generate --model " + ck + " --prompt 'On' --max-new-tokens 100000",
                                            [&](const std::string& out, pid_t pid) {
                                              if (!sent && !out.empty()) sent = ::kill(pid, SIGTERM) == 0;
                                            }, env);
  EXPECT_TRUE(sent);
  EXPECT_TRUE(testing::EntryNames(tmp).empty()) << testing::EntryNames(tmp).front();
  auto nan = run("generate --model " + ck + prompt + " --temperature nan");
  EXPECT_EQ(nan.exit_code, 1) << nan.out;
  EXPECT_EQ(nan.signal, 0);
  EXPECT_TRUE(Has(nan, "--temperature nan: must be a finite number >= 0")) << nan.out;
  auto tiny = run("generate --model " + ck + prompt + " --temperature 1e-45");
  EXPECT_EQ(tiny.exit_code, 0) << tiny.out;
  EXPECT_EQ(tiny.out, from_ck.out);  // the most likely token every time: greedy
}

// fp16 with a dynamic loss scale that reaches its minimum and still overflows can make no
// progress: the run stops with an error (DeepSpeed raises there too) instead of "training"
// to the end with every step skipped.
TEST(NothingLost, ARunStuckAtTheMinimumLossScaleStopsWithAnError) {
  testing::TempDir dir;
  auto r = RunStrata(Train(dir.path(), "--steps 60 --set bf16.enabled=false --set fp16.enabled=true "
                                       "--set fp16.initial_scale_power=3 --set fp16.hysteresis=1 "
                                       "--set fp16.min_loss_scale=1 --set optimizer.params.lr=1000"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Has(r, "overflowed at the minimum loss scale (fp16.min_loss_scale 1)")) << r.out;
  EXPECT_FALSE(Has(r, "final loss")) << r.out;
}

TEST(NothingLost, MetricsThatCannotBeWrittenAreSaidAndEarlierOnesKept) {
  testing::TempDir dir;
  auto full = RunStrata(Train(dir.path(), "--steps 3 --metrics /dev/full"));
  EXPECT_EQ(full.exit_code, 0) << full.out;
  EXPECT_TRUE(Has(full, "metrics file '/dev/full': cannot write (No space left on device)")) << full.out;
  EXPECT_TRUE(Has(full, "metrics file '/dev/full': 5 of 5 lines were not written")) << full.out;
  const std::string metrics = dir.path() + "/run.jsonl";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 2 --metrics " + metrics)).exit_code, 0);
  const std::string first = Read(metrics);
  auto again = RunStrata(Train(dir.path(), "--steps 2 --metrics " + metrics));
  EXPECT_TRUE(Has(again, "metrics: appending to '" + metrics + "'")) << again.out;
  EXPECT_EQ(Read(metrics).substr(0, first.size()), first);
  const std::string both = Read(metrics);
  EXPECT_EQ(std::count(both.begin(), both.end(), '\n'), 2 * std::count(first.begin(), first.end(), '\n'));
}

// A run resumed past its --steps trains nothing and saves nothing: it used to save the resumed
// state as step_<steps>, an older step's name on a newer state, which `latest` then named.
TEST(NothingLost, ARunResumedPastItsStepsSavesNothing) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 4 --save " + ck)).exit_code, 0);
  const auto before = Snapshot(ck);
  auto r = RunStrata(Train(dir.path(), "--steps 2 --save " + ck + " --resume " + ck));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r, "resumed at step 4, which is not before strata.steps 2: nothing to train")) << r.out;
  auto after = Snapshot(ck);
  after.erase(".strata.lock");
  auto expected = before;
  expected.erase(".strata.lock");
  EXPECT_EQ(after, expected);
  EXPECT_EQ(Read(ck + "/latest"), "step_00000004\n");
}

// The default spelled out is the same model: ffn_hidden 0 (4 x d_model for GPT-2) and 128.
TEST(NothingLost, AModelSpelledWithItsDefaultsResumes) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  ASSERT_EQ(RunStrata(Train(dir.path(), "--steps 2 --save " + ck)).exit_code, 0);
  auto r = RunStrata(Train(dir.path(), "--steps 3 --save " + ck + " --resume " + ck +
                                       " --set strata.model.ffn_hidden=128 --set strata.model.max_positions=32"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Has(r, "at step 2")) << r.out;
  auto other = RunStrata(Train(dir.path(), "--steps 4 --save " + ck + " --resume " + ck +
                                           " --set strata.model.ffn_hidden=64"));
  EXPECT_EQ(other.exit_code, 1) << other.out;
  EXPECT_TRUE(Has(other, "strata.model.ffn_hidden is 128 there, 64 in this run")) << other.out;
}

}  // namespace
}  // namespace strata
