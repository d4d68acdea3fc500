// strata.no_decay: the parameters AdamW leaves without weight decay, by name. The names
// matched are Hugging Face's (src/model/hf_names.h: "model.layers.3.input_layernorm.weight"),
// whatever the model was built from, so that the groups are those transformers' Trainer forms
// for the same model. Its default ("auto") is that Trainer's: biases and normalisation
// weights; with 8-bit moments, whose blocks are updated whole, none.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include "src/config/json_reader.h"
#include "src/config/train_config.h"

namespace strata {

// Hugging Face Trainer's forbidden name patterns (transformers 5, get_decay_parameter_names),
// and "ln_" for the nn.LayerNorm modules it also leaves out by type (GPT-2's ln_1, ln_2, ln_f).
const std::vector<std::string>& HfTrainerNoDecay();

// Reads strata.no_decay: "auto", or a list of regular expressions (ECMAScript), each
// searched for in a parameter's name; a pattern that does not compile is named.
Status ParseNoDecay(JsonReader& strata, TrainConfig* c);
// Refuses patterns where the update cannot honour them (8-bit moments).
Status CheckNoDecay(const TrainConfig& c);

// The patterns in force: as written, else the default for the run's state format.
std::vector<std::string> NoDecayPatterns(const TrainConfig& c);
// The patterns compiled once, for the names of every parameter of a model.
class NameMatcher {
 public:
  explicit NameMatcher(const std::vector<std::string>& patterns);
  // Whether any pattern is found in `hf_name`.
  bool Matches(const std::string& hf_name) const;

 private:
  std::vector<std::regex> patterns_;
};

}  // namespace strata
