// The data and placement of the tests that train side by side with a Python peer on the same
// batches (decay groups, QLoRA): a token file of 2 x (seq + 1) random tokens read with
// eval_fraction 0.5, so that every row of every step is tokens [0, seq]; parameters and
// optimizer states on NVMe in the test's folder, as users fine-tune.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/hf_loader.h"
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
  cfg->offload_param.device = cfg->offload_optimizer.device = OffloadDevice::kNvme;
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

}  // namespace strata::testing
