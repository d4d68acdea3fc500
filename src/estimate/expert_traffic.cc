#include "src/estimate/expert_traffic.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "src/estimate/estimator.h"
#include "src/estimate/step_traffic.h"

namespace strata {

double ExpectedExpertShare(int64_t num_experts, int64_t top_k, int64_t tokens) {
  if (tokens <= 0) return 0;
  if (num_experts <= 0 || top_k >= num_experts) return 1;
  const double missed = static_cast<double>(top_k) / static_cast<double>(num_experts);
  // (1 - missed)^tokens through log1p / expm1: exact to the last digits at a handful of tokens too
  return -std::expm1(static_cast<double>(tokens) * std::log1p(-missed));
}

int64_t TokensPerVisit(const SettledConfig& cfg, const ShardPlan& plan) {
  return cfg.micro_batch * cfg.model.seq_len * (cfg.layer_major ? cfg.grad_accum : 1) *
         (plan.GathersAcrossRanks() ? plan.world : 1);
}

uint64_t ExpertBytesIn(const ShardPlan& plan, int b, ElementRange read) {
  const model::ExpertSpan& e = plan.blocks[b].experts;
  const int64_t overlap = std::min(e.end(), read.end()) - std::max(e.begin, read.begin);
  return e.count > 0 && overlap > 0 ? static_cast<uint64_t>(overlap) * plan.dsize : 0;
}

namespace {

// Tokens per visit from which uniform routing reads 99% of the experts or more.
int64_t TokensForAllButOnePercent(int64_t num_experts, int64_t top_k) {
  if (top_k >= num_experts) return 1;
  return static_cast<int64_t>(std::ceil(std::log(0.01) / std::log1p(-static_cast<double>(top_k) / num_experts)));
}

// Why no visit reads fewer experts, or "" where some do.
std::string WhyEveryExpert(const SettledConfig& cfg, const ShardPlan& plan, int sparse, int fetching) {
  if (cfg.expert_fetch == ExpertFetch::kAll) return "strata.expert_fetch \"all\": every visit reads every expert";
  if (cfg.keep_activations) return "strata.recompute \"never\": a kept backward reads every expert";
  if (fetching == 0) return fmt::format("all {} sparse blocks are resident on the device: nothing is fetched", sparse);
  return "";
}

// Which columns the table has: the NVMe reads where the working weights are on NVMe, the copies
// to the device off the host.
struct Columns {
  bool nvme = false, link = false;
};

// One row of the table: the share read, the NVMe bytes read and the bytes copied in per step.
std::string Row(const std::string& label, double share, const StepTraffic& s, const LinkTraffic& l, Columns c,
                bool routed) {
  std::string row = fmt::format("  {:<22} {:>7.2f}%", label, 100 * share);
  if (c.nvme) row += fmt::format("  {:>12}", HumanBytes(routed ? s.read_at_most : s.read_all_experts));
  if (c.link) row += fmt::format("  {:>13}", HumanBytes(routed ? l.in : l.in_all_experts));
  return row + "\n";
}

}  // namespace

std::string FormatExpertTraffic(const SettledConfig& cfg, const ShardPlan& plan) {
  const model::MoeOptions& moe = cfg.model.moe;
  int sparse = 0, fetching = 0;
  for (int b = 0; b < static_cast<int>(plan.blocks.size()); ++b) {
    sparse += plan.blocks[b].experts.count > 0;
    fetching += plan.blocks[b].experts.count > 0 && !plan.resident[b];
  }
  if (sparse == 0) return "";
  const int64_t tokens = TokensPerVisit(cfg, plan);
  const double share = ExpectedExpertShare(moe.num_experts, moe.top_k, tokens);
  std::string out = fmt::format(
      "mixture of experts: {} experts in each of {} sparse layers, top-{}, {} tokens per visit of a block ({}); "
      "expected share of a layer's experts some token routes to at uniform routing, 1 - (1 - {}/{})^tokens: {:.2f}%\n",
      moe.num_experts, sparse, moe.top_k, tokens,
      (cfg.layer_major ? fmt::format("micro-batch {} x seq {} x {} micro-batches, layer-major", cfg.micro_batch,
                                     cfg.model.seq_len, cfg.grad_accum)
                       : fmt::format("micro-batch {} x seq {}", cfg.micro_batch, cfg.model.seq_len)) +
          (plan.GathersAcrossRanks()
               ? fmt::format(" x {} ranks: ZeRO-3 ranks gather the experts some rank's tokens chose", plan.world)
               : std::string()),
      moe.top_k, moe.num_experts, 100 * share);
  if (const std::string why = WhyEveryExpert(cfg, plan, sparse, fetching); !why.empty()) return out + why + "\n";
  const StepTraffic s = EstimateStepTraffic(cfg, plan);
  const LinkTraffic l = EstimateLinkTraffic(cfg, plan);
  const Columns c{s.working > 0, !plan.host_device && l.in_all_experts > 0};
  if (!c.nvme && !c.link) return out + "the working weights are read where they live: no fetch to save\n";
  const std::string resident =
      fetching < sparse ? fmt::format(" ({} of the {} sparse blocks fetched, the others resident)", fetching, sparse) : "";
  out += fmt::format("strata.expert_fetch \"routed\": bytes per step (per rank) at uniform routing, by tokens per "
                     "visit{}\n  {:<22} {:>8}{}{}\n", resident, "tokens per visit", "experts",
                     c.nvme ? fmt::format("  {:>12}", "NVMe read") : "", c.link ? "  to the device" : "");
  std::vector<int64_t> counts = {1, 16, 256};
  counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int64_t t) { return t >= tokens; }), counts.end());
  for (int64_t t : counts)
    out += Row(std::to_string(t), ExpectedExpertShare(moe.num_experts, moe.top_k, t), EstimateStepTraffic(cfg, plan, t),
               EstimateLinkTraffic(cfg, plan, t), c, true);
  out += Row(fmt::format("{} (this config)", tokens), share, s, l, c, true);
  out += Row("every expert", 1, s, l, c, false);
  const int64_t most = TokensForAllButOnePercent(moe.num_experts, moe.top_k);
  if (tokens >= most)
    out += fmt::format("routing saves {} of the experts' bytes here: from {} tokens per visit on, uniform routing reads "
                       "99% of them or more; only fewer tokens per visit (a smaller micro-batch or sequence) read "
                       "fewer\n", share > 1 - 1e-4 ? "none" : fmt::format("{:.2g}%", 100 * (1 - share)), most);
  return out;
}

}  // namespace strata
