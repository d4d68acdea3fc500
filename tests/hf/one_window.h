// The data and placement of the tests that train side by side with a Python peer on the same
// batches (decay groups, QLoRA, LoRA on experts): a token file of 2 x (seq + 1) random tokens read with
// eval_fraction 0.5, so that every row of every step is tokens [0, seq]; parameters and
// optimizer states on NVMe in the test's folder, as users fine-tune.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "support/cli_run.h"
#include "support/settled.h"

namespace strata::testing {

inline void TrainOnOneWindow(const std::string& dir, int64_t seq, uint32_t seed, TrainConfig* cfg) {
  const std::string path = dir + "/tokens.u16";
  std::mt19937 rng(seed);
  std::vector<uint16_t> tokens(2 * (seq + 1));
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng() % static_cast<uint32_t>(cfg->model.vocab_size));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()),
                                              static_cast<std::streamsize>(tokens.size() * 2));
  cfg->data.path = path;
  cfg->data.format = data::TokenFormat::kUint16;
  cfg->data.eval_fraction = 0.5;
  cfg->offload_param.nvme_path = cfg->offload_optimizer.nvme_path = dir;
  cfg->offload_param.device = cfg->offload_optimizer.device = Tier::kNvme;
}

// `cfg` (from the Hugging Face folder `hf`) trained by 2 ranks for `steps` steps, checkpointed
// into `ck` after them (and into `initial` before them, unless empty): rank 0's losses, or
// the first error.
inline std::string TrainTwoRanksFromFolder(const TrainConfig& cfg, const std::string& hf, int steps,
                                           const std::string& ck, const std::string& initial,
                                           std::vector<double>* losses) {
  auto w = ckpt::HfWeights::Open(hf, cfg.model);
  if (!w.ok()) return w.status().ToString();
  auto data = data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  if (!data.ok()) return data.status().ToString();
  const int blocks = model::ModelSpec(cfg.model).num_blocks();
  return RunRanks(2, [&](int rank, Communicator& c) -> Status {
    STRATA_ASSIGN_OR_RETURN(const RunConfig settled, TrySettle(cfg, c.world_size()));
    STRATA_ASSIGN_OR_RETURN(auto e, Engine::Create(settled, &c, nullptr, ckpt::MakeInitFromHooks(*w, blocks)));
    if (!initial.empty()) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*e, c, cfg, initial, 0));
    for (int s = 0; s < steps; ++s) {
      STRATA_ASSIGN_OR_RETURN(StepStats st, e->Step(s, **data));
      if (rank == 0) losses->push_back(st.loss);
    }
    return ckpt::SaveCheckpoint(*e, c, cfg, ck, steps);
  });
}

// A LoRA run beside PEFT's, in `dir`: the strata.lora section `lora` over the folder `hf` (fp32,
// ZeRO-3, micro-batch 1, no clipping, AdamW at `lr` without decay) on one window of `seq`
// tokens drawn with `seed`, trained by 2 ranks for `steps` steps into dir/ckpt; the initial
// adapters exported to dir/adapter0, the trained ones (`strata export`) to dir/adapter, the
// losses to dir/losses.json. `error` is empty when all of it worked.
struct LoraBesidePeft {
  TrainConfig cfg;
  std::string ck, init_adapter, adapter, losses_file, export_out, error;
};
inline LoraBesidePeft TrainLoraBesidePeft(const std::string& dir, const std::string& hf, const std::string& lora,
                                          double lr, int64_t seq, uint32_t seed, int steps) {
  LoraBesidePeft run;
  auto fail = [&run](std::string error) {
    run.error = std::move(error);
    return run;
  };
  auto parsed = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "bf16": {"enabled": false}, "zero_optimization": {"stage": 3},
      "optimizer": {"type": "AdamW", "params": {"lr": )" + nlohmann::json(lr).dump() + R"(, "weight_decay": 0.0}},
      "strata": {"model": {"from": )" + nlohmann::json(hf).dump() + R"(, "seq_len": )" + std::to_string(seq) +
                                 R"(}, "lora": )" + lora + "}}", "test");
  if (!parsed.ok()) return fail(parsed.status().ToString());
  run.cfg = *parsed;
  TrainOnOneWindow(dir, seq, seed, &run.cfg);
  const std::string initial = dir + "/ckpt0";
  run.ck = dir + "/ckpt";
  run.init_adapter = dir + "/adapter0";
  run.adapter = dir + "/adapter";
  run.losses_file = dir + "/losses.json";
  std::vector<double> losses;
  run.error = TrainTwoRanksFromFolder(run.cfg, hf, steps, run.ck, initial, &losses);
  if (!run.error.empty()) return run;
  if (auto rep = ckpt::ExportPeftAdapter(initial, run.init_adapter, {}); !rep.ok()) return fail(rep.status().ToString());
  const CliRun r = RunStrata("export " + run.ck + " --out " + run.adapter);
  run.export_out = r.out;
  if (r.exit_code != 0) return fail(r.out);
  std::ofstream(run.losses_file) << nlohmann::json(losses).dump();
  return run;
}

}  // namespace strata::testing
