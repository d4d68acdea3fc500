#include "src/hf/lora_export.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/ranges.h>

#include "src/hf/export_target.h"
#include "src/model/hf_names.h"
#include "src/checkpoint/manifest.h"
#include "src/config/train_config.h"

namespace strata::ckpt {

using model::CanonicalHfName;
using model::HfName;
using model::IsHfBuffer;
using model::ToHfName;
namespace fs = std::filesystem;
namespace {

// "r 4, alpha 8 on q_proj, v_proj"
std::string Summary(const model::LoraConfig& l) {
  return fmt::format("r {}, alpha {} on {}", l.r, l.alpha, fmt::join(l.target_modules, ", "));
}

// lora_alpha as PEFT writes it: an integer when it is one.
nlohmann::ordered_json Alpha(double a) {
  if (a == std::floor(a) && std::abs(a) < 1e15) return static_cast<int64_t>(a);
  return a;
}

// The keys peft's LoraConfig has had since 0.9 (older and newer versions read them); every
// other field keeps its default. Plain LoRA: alpha / r scaling (no rsLoRA), no DoRA, no bias.
nlohmann::ordered_json AdapterConfig(const model::LoraConfig& l, const std::string& source) {
  nlohmann::ordered_json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = source.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(source);
  j["revision"] = nullptr;
  j["inference_mode"] = true;
  j["r"] = l.r;
  j["lora_alpha"] = Alpha(l.alpha);
  j["lora_dropout"] = l.dropout;
  j["target_modules"] = l.target_modules;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["init_lora_weights"] = true;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["rank_pattern"] = nlohmann::ordered_json::object();
  j["alpha_pattern"] = nlohmann::ordered_json::object();
  return j;
}

// Every adapter of the checkpoint under PEFT's saved names:
// "base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight" (layer i = block i + 1).
Status AdapterTensors(const Consolidator& c, ExportDType dtype, std::vector<ExportedTensor>* out) {
  for (int i = 0; i < c.num_blocks(); ++i) {
    const nlohmann::json& params = c.manifest()["layout"][i].at("params");
    bool any = false;
    for (const nlohmann::json& p : params) any = any || IsAdapterName(p.at("name").get<std::string>());
    if (!any) continue;  // the embedding and the head: frozen, no masters
    STRATA_ASSIGN_OR_RETURN(FlatBlock flat, c.Flat(i, /*with_base=*/false));
    for (const nlohmann::json& p : params) {
      const std::string name = p.at("name").get<std::string>();
      if (!IsAdapterName(name)) continue;
      const HfName hf = ToHfName(/*gpt2=*/false, static_cast<int>(c.model().n_layer), flat.block, name);
      STRATA_ASSIGN_OR_RETURN(ExportedTensor t,
                              c.Extract(flat, p, "base_model.model." + hf.name + ".weight", /*transpose=*/false, dtype));
      out->push_back(std::move(t));
    }
  }
  return Status();
}

StatusOr<ExportReport> Peft(const std::string& checkpoint, const std::string& out, const PeftOptions& o) {
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  STRATA_RETURN_IF_ERROR(CheckOutsideCheckpoint(out, checkpoint, c.step_dir()));
  if (!c.lora())
    return Error(StatusCode::kFailedPrecondition, "'{}' has no LoRA adapters (its run had no strata.lora): export it as "
                 "a model folder or a .safetensors file", c.step_dir());
  ExportReport rep;
  rep.step_dir = c.step_dir();
  rep.step = c.manifest()["step"].get<int64_t>();
  STRATA_ASSIGN_OR_RETURN(rep.source, SourceFolder(c.manifest(), o.source, "base_model_name_or_path is null", &rep.notes));
  if (!rep.source.empty()) rep.source = fs::absolute(rep.source).lexically_normal().string();  // loadable from anywhere
  const std::string compute = c.manifest().value("compute_dtype", std::string("fp32"));
  if (rep.source.empty() && rep.notes.empty())  // (else the recorded source has vanished: noted)
    rep.notes.push_back("the run did not start from a Hugging Face folder (--init-from / strata.model.from): "
                        "base_model_name_or_path is null, and the base these adapters belong to exists only in the "
                        "checkpoint (--merge-lora exports base and adapters merged)");
  else if (compute != "fp32")
    rep.notes.push_back(fmt::format("the adapters were trained on the base rounded to {} (the run's compute dtype); "
                                    "on the fp32 base their outputs differ slightly", compute));
  std::vector<ExportedTensor> tensors;
  STRATA_RETURN_IF_ERROR(AdapterTensors(c, o.dtype, &tensors));
  std::vector<TensorView> views;
  for (const ExportedTensor& t : tensors) {
    views.push_back(t.view);
    rep.parameters += t.numel;
  }
  rep.tensors = static_cast<int64_t>(views.size());
  const nlohmann::ordered_json config = AdapterConfig(c.model().lora, rep.source);
  STRATA_ASSIGN_OR_RETURN(OutFolder f, OutFolder::Make(out, "a PEFT adapter folder", o.overwrite));
  STRATA_RETURN_IF_ERROR(f.Write("adapter_config.json", config.dump(2) + "\n"));
  STRATA_RETURN_IF_ERROR(WriteSafetensors(f.Path("adapter_model.safetensors"), views, ExportMetadata(), &rep.bytes));
  STRATA_RETURN_IF_ERROR(f.Publish());  // on any error above, f's destructor removes the temporary
  rep.details.push_back(fmt::format("adapter_config.json: LORA, {}, base_model_name_or_path {}", Summary(c.model().lora),
                                    config["base_model_name_or_path"].dump()));
  rep.details.push_back(fmt::format("adapter_model.safetensors: lora_A [r, in] and lora_B [out, r] of {} projections",
                                    rep.tensors / 2));
  rep.details.push_back(fmt::format("load: peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({}), "
                                    "\"{}\")", rep.source.empty() ? "BASE" : nlohmann::json(rep.source).dump(), f.target()));
  return rep;
}

}  // namespace

Status MergeAdapters(const nlohmann::json& params, double scale, const std::string& where, FlatBlock* flat) {
  std::map<std::string, const nlohmann::json*> by_name;
  for (const nlohmann::json& p : params) by_name[p.at("name").get<std::string>()] = &p;
  const int b = flat->block;
  for (const auto& [name, pa] : by_name) {
    if (!name.ends_with(".lora_A")) continue;
    const std::string module = name.substr(0, name.size() - 7);
    const auto pb = by_name.find(module + ".lora_B"), pw = by_name.find(module + ".weight");
    if (pb == by_name.end() || pw == by_name.end())
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {} has '{}' but no '{}.lora_B' and '{}.weight'",
                   where, b, name, module, module);
    const auto sa = pa->at("shape").get<std::vector<int64_t>>(), sb = pb->second->at("shape").get<std::vector<int64_t>>(),
               sw = pw->second->at("shape").get<std::vector<int64_t>>();
    if (sa.size() != 2 || sb.size() != 2 || sw.size() != 2 || sb[1] != sa[0] || sw[0] != sb[0] || sw[1] != sa[1])
      return Error(StatusCode::kDataLoss, "'{}/manifest.json': block {}: '{}' [{}], '{}.lora_B' [{}] and '{}.weight' "
                   "[{}] do not compose", where, b, name, fmt::join(sa, ", "), module, fmt::join(sb, ", "), module,
                   fmt::join(sw, ", "));
    const int64_t r = sa[0], in = sa[1], out = sw[0];
    const int64_t oa = pa->at("offset").get<int64_t>(), ob = pb->second->at("offset").get<int64_t>(),
                  ow = pw->second->at("offset").get<int64_t>();
    const int64_t padded = static_cast<int64_t>(flat->values.size());
    for (const auto& [off, n, what] : {std::tuple{oa, r * in, name}, std::tuple{ob, out * r, module + ".lora_B"},
                                       std::tuple{ow, out * in, module + ".weight"}}) {
      if (off < 0 || off + n > padded)
        return Error(StatusCode::kDataLoss, "'{}': parameter '{}' of block {} lies outside its flat group", where, what, b);
    }
    for (const auto& [off, n, what] : {std::tuple{oa, r * in, name}, std::tuple{ob, out * r, module + ".lora_B"}})
      for (int64_t i = off; i < off + n; ++i)
        if (!flat->seen[i])
          return Error(StatusCode::kDataLoss, "'{}': no rank file holds element {} of block {} ('{}')", where, i, b, what);
    const float* A = flat->values.data() + oa;
    const float* B = flat->values.data() + ob;
    float* W = flat->values.data() + ow;
    const float s = static_cast<float>(scale);
    std::vector<float> delta(in);
    for (int64_t o = 0; o < out; ++o) {
      std::fill(delta.begin(), delta.end(), 0.f);
      for (int64_t k = 0; k < r; ++k) {
        const float c = B[o * r + k];
        const float* a = A + k * in;
        for (int64_t i = 0; i < in; ++i) delta[i] += c * a[i];
      }
      float* w = W + o * in;
      for (int64_t i = 0; i < in; ++i) w[i] += s * delta[i];
    }
  }
  return Status();
}

Status CheckLoraMerge(const Consolidator& c, bool merge_lora, bool single_file) {
  if (!c.lora() || merge_lora) return Status();
  if (single_file)
    return Error(StatusCode::kFailedPrecondition, "'{}' is a LoRA checkpoint ({}), and one safetensors file of "
                 "Hugging Face weights has no place for adapters: add --merge-lora for the merged model's weights "
                 "(W + alpha/r * B @ A), or give --out a folder (no .safetensors) to write the adapters as a PEFT adapter "
                 "folder", c.step_dir(),
                 Summary(c.model().lora));
  return Error(StatusCode::kFailedPrecondition, "'{}' is a LoRA checkpoint ({}): a Hugging Face model folder of it "
               "holds the merged model (--merge-lora); without --merge-lora `strata export` writes a PEFT adapter folder",
               c.step_dir(), Summary(c.model().lora));
}

void DescribeMerge(const Consolidator& c, ExportReport* rep) {
  int64_t merged = 0;
  for (const nlohmann::json& blk : c.manifest()["layout"])
    for (const nlohmann::json& p : blk.at("params")) merged += p.at("name").get<std::string>().ends_with(".lora_A");
  const model::LoraConfig& l = c.model().lora;
  rep->details.push_back(fmt::format("merged the LoRA adapters ({}) into {} projections: W + {} * B @ A", Summary(l),
                                     merged, l.scale()));
  const std::string compute = c.manifest().value("compute_dtype", std::string("fp32"));
  if (compute != "fp32")
    rep->notes.push_back(fmt::format("the merged base weights are the run's {} working copy (a LoRA run keeps no fp32 "
                                     "master of the frozen base), so they are {}-rounded{}", compute, compute,
                                     c.manifest().value("hf_source", std::string()).empty()
                                         ? ""
                                         : "; for the original base at full precision export the PEFT adapter instead "
                                           "and merge it onto that model (peft's merge_and_unload)"));
}

StatusOr<model::LoraConfig> CheckpointLora(const std::string& checkpoint) {
  STRATA_ASSIGN_OR_RETURN(std::string step_dir, ResolveStepDir(checkpoint));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json m, ReadManifest(step_dir));
  const std::string where = "'" + step_dir + "/manifest.json'";
  if (!m.contains("model")) return Error(StatusCode::kDataLoss, "{}: no \"model\"", where);
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig model, ParseModelConfigJson(m["model"], where));
  return model.lora;
}

StatusOr<ExportReport> ExportPeftAdapter(const std::string& checkpoint, const std::string& out,
                                         const PeftOptions& options) {
  try {
    return Peft(checkpoint, out, options);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", checkpoint, e.what());
  }
}

}  // namespace strata::ckpt
