// strata.objective (objective_section.h).
#include "src/config/objective_section.h"

namespace strata {

namespace {

Status ReadObjective(JsonReader& s, TrainConfig* c) {
  if (!s.Has("objective")) return Status();
  const nlohmann::json* raw = s.Raw("objective");
  std::string type = ObjectiveName(c->objective);
  if (raw->is_string()) {
    STRATA_RETURN_IF_ERROR(s.Choice("objective", &type, {"language_model", "dpo"}));
    c->objective = type == "dpo" ? Objective::kDpo : Objective::kLanguageModel;
    return Status();
  }
  if (!raw->is_object())
    return InvalidArgument("{}: expected \"language_model\", \"dpo\" or an object with \"type\"", s.PathOf("objective"));
  STRATA_ASSIGN_OR_RETURN(JsonReader o, s.Child("objective"));
  STRATA_RETURN_IF_ERROR(o.Choice("type", &type, {"language_model", "dpo"}));
  c->objective = type == "dpo" ? Objective::kDpo : Objective::kLanguageModel;
  if (c->objective == Objective::kDpo) {
    model::DpoOptions& d = c->dpo;
    STRATA_RETURN_IF_ERROR(o.Double("beta", &d.beta, 1e-6, 1e6));
    std::string loss = d.loss == model::DpoLossType::kRobust ? "robust" : "sigmoid";
    STRATA_RETURN_IF_ERROR(o.Choice("loss_type", &loss, {"sigmoid", "robust"}));
    d.loss = loss == "robust" ? model::DpoLossType::kRobust : model::DpoLossType::kSigmoid;
    STRATA_RETURN_IF_ERROR(o.Double("label_smoothing", &d.label_smoothing, 0.0, 0.4999));
    if (d.label_smoothing > 0 && d.loss != model::DpoLossType::kRobust)
      return InvalidArgument("{}: {} is TRL's label smoothing of the \"robust\" loss; the \"sigmoid\" loss has none",
                             o.PathOf("label_smoothing"), d.label_smoothing);
  }
  o.UnusedKeys(&c->warnings);
  return Status();
}

Status CheckObjectiveData(const TrainConfig& c) {
  if (c.objective != Objective::kDpo) return Status();
  if (c.data.path.empty())
    return InvalidArgument("strata.objective \"dpo\" trains on preference pairs: set strata.data.path to a token file "
                           "that scripts/prepare_data.py wrote from prompt/chosen/rejected records");
  if (c.data.packing != data::Packing::kNone)
    return InvalidArgument("strata.objective \"dpo\": strata.data.packing must be \"none\" (one example a row: a "
                           "chosen or a rejected completion), not \"{}\"",
                           c.data.packing == data::Packing::kPacked ? "packed" : "windows");
  if (c.data.long_examples != data::LongExamples::kTruncate)
    return InvalidArgument("strata.objective \"dpo\": strata.data.long_examples must be \"truncate\" (TRL's "
                           "max_length keeps an example's start; a split one would be two rows)");
  return Status();
}

}  // namespace

const char* ObjectiveName(Objective o) { return o == Objective::kDpo ? "dpo" : "language_model"; }

Status ParseObjective(JsonReader& s, TrainConfig* c) {
  STRATA_RETURN_IF_ERROR(ReadObjective(s, c));
  c->data.pairs = c->objective == Objective::kDpo;
  return CheckObjectiveData(*c);
}

}  // namespace strata
