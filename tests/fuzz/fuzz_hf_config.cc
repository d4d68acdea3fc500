// libFuzzer target: a Hugging Face model folder's JSON files. Input: a config.json text, then
// (after the first NUL byte) a model.safetensors.index.json text. Every input must end as a
// ModelConfig or a Status, never a crash; a config that reads must also survive the way back
// (the config.json export writes for it reads as the same model).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/base/json_text.h"
#include "src/hf/hf_index.h"
#include "src/model/hf_config.h"

namespace {

void CheckRoundTrip(const strata::model::ModelConfig& c) {
  const std::string text = strata::model::HfConfigJson(c, "float32").dump();
  auto j = strata::ParseJsonText(text, "exported config.json");
  if (!j.ok()) std::abort();
  auto back = strata::model::ModelConfigFromHf(*j, "exported config.json");
  if (!back.ok()) std::abort();  // export would write a folder that --init-from refuses
  if (back->arch != c.arch || back->vocab_size != c.vocab_size || back->d_model != c.d_model ||
      back->n_layer != c.n_layer || back->n_head != c.n_head || strata::model::FfnHidden(*back) != strata::model::FfnHidden(c) ||
      strata::model::HeadDim(*back) != strata::model::HeadDim(c) ||
      strata::model::MaxPositions(*back) != strata::model::MaxPositions(c))
    std::abort();  // it would read as another model
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string config = all.substr(0, nul);
  if (auto j = strata::ParseJsonText(config, "config.json"); j.ok()) {
    auto c = strata::model::ModelConfigFromHf(*j, "config.json");
    if (c.ok()) CheckRoundTrip(*c);
  }
  if (nul != std::string::npos) (void)strata::ckpt::ParseSafetensorsIndex(all.substr(nul + 1), "index.json");
  return 0;
}
