#include "src/config/data_section.h"

#include <array>
#include <utility>

namespace strata {
namespace {

// Each setting's spelling, in the order the error messages list them.
constexpr std::array<std::pair<const char*, data::TokenFormat>, 4> kFormats{{{"auto", data::TokenFormat::kAuto},
                                                                             {"text", data::TokenFormat::kText},
                                                                             {"uint16", data::TokenFormat::kUint16},
                                                                             {"uint32", data::TokenFormat::kUint32}}};
constexpr std::array<std::pair<const char*, data::Packing>, 3> kPackings{{{"windows", data::Packing::kWindows},
                                                                          {"none", data::Packing::kNone},
                                                                          {"packed", data::Packing::kPacked}}};
constexpr std::array<std::pair<const char*, data::LongExamples>, 2> kLongExamples{
    {{"split", data::LongExamples::kSplit}, {"truncate", data::LongExamples::kTruncate}}};

template <typename T, size_t N>
Status ReadChoice(JsonReader& d, const char* key, const std::array<std::pair<const char*, T>, N>& names, T* out) {
  std::string name;
  std::vector<std::string> allowed;
  for (const auto& [n, v] : names) {
    allowed.push_back(n);
    if (v == *out) name = n;
  }
  STRATA_RETURN_IF_ERROR(d.Choice(key, &name, allowed));
  for (const auto& [n, v] : names)
    if (name == n) *out = v;
  return Status();
}

template <typename T, size_t N>
const char* NameOf(const std::array<std::pair<const char*, T>, N>& names, T value) {
  for (const auto& [n, v] : names)
    if (v == value) return n;
  return "?";
}

}  // namespace

Status ParseDataSection(JsonReader& s, TrainConfig* c) {
  STRATA_ASSIGN_OR_RETURN(JsonReader d, s.Child("data"));
  STRATA_RETURN_IF_ERROR(d.String("path", &c->data.path));
  STRATA_RETURN_IF_ERROR(ReadChoice(d, "format", kFormats, &c->data.format));
  STRATA_RETURN_IF_ERROR(d.String("loss_mask", &c->data.loss_mask));
  STRATA_RETURN_IF_ERROR(d.Double("eval_fraction", &c->data.eval_fraction, 0.001, 0.5));
  STRATA_RETURN_IF_ERROR(d.String("eval_path", &c->data.eval_path));
  STRATA_RETURN_IF_ERROR(d.Int("epochs", &c->data.epochs, 0, int64_t{1} << 30));
  STRATA_RETURN_IF_ERROR(ReadChoice(d, "packing", kPackings, &c->data.packing));
  STRATA_RETURN_IF_ERROR(ReadChoice(d, "long_examples", kLongExamples, &c->data.long_examples));
  c->data.seed = c->seed;
  d.UnusedKeys(&c->warnings);
  return Status();
}

nlohmann::json DataConfigJson(const data::DataConfig& d) {
  return {{"path", d.path},
          {"format", NameOf(kFormats, d.format)},
          {"loss_mask", d.loss_mask},
          {"eval_fraction", d.eval_fraction},
          {"eval_path", d.eval_path},
          {"epochs", d.epochs},
          {"packing", NameOf(kPackings, d.packing)},
          {"long_examples", NameOf(kLongExamples, d.long_examples)}};
}

}  // namespace strata
