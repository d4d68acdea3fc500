// The optimizer table (optimizer_rule.h).
#include "src/engine/optimizer_rule.h"

#include <array>

namespace strata {
namespace {

constexpr std::array<OptimizerRule, 5> kRules = {{
    {OptimizerKind::kAdam, "adam", "AdamW", UpdateRule::kAdam, true, true, true, "Adam m", "Adam v"},
    {OptimizerKind::kLion, "lion", "Lion", UpdateRule::kLion, true, false, false, "Lion momentum", "-"},
    {OptimizerKind::kAdagrad, "adagrad", "Adagrad", UpdateRule::kAdagrad, false, true, false, "-",
     "Adagrad sum of squares"},
    {OptimizerKind::kLamb, "lamb", "Lamb", UpdateRule::kLamb, true, true, false, "LAMB m", "LAMB v", true},
    // (the AdamW half's v; a matrix's stays 0)
    {OptimizerKind::kMuon, "muon", "Muon", UpdateRule::kMuon, true, true, false, "Muon momentum / AdamW m", "AdamW v",
     false, true},
}};

}  // namespace

const OptimizerRule& RuleOf(OptimizerKind kind) {
  for (const OptimizerRule& r : kRules)
    if (r.kind == kind) return r;
  return kRules[0];
}

const OptimizerRule* RuleNamed(const std::string& name) {
  for (const OptimizerRule& r : kRules)
    if (name == r.name) return &r;
  return nullptr;
}

}  // namespace strata
