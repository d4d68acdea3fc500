#include "src/hf/lora_export.h"

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "src/hf/export_target.h"
#include "src/model/hf_names.h"
#include "src/checkpoint/manifest.h"
#include "src/config/train_config.h"

namespace strata::ckpt {

using model::ToHfName;
namespace fs = std::filesystem;
namespace {

// "r 4, alpha 8 on q_proj, v_proj" (", experts.down_proj")
std::string Summary(const model::LoraConfig& l) {
  std::vector<std::string> targets = l.target_modules;
  targets.insert(targets.end(), l.target_parameters.begin(), l.target_parameters.end());
  return fmt::format("r {}, alpha {} on {}", l.r, l.alpha, fmt::join(targets, ", "));
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
  // (null beside target_parameters alone, as PEFT writes target_modules=None)
  j["target_modules"] = l.target_modules.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(l.target_modules);
  if (!l.target_parameters.empty()) j["target_parameters"] = l.target_parameters;  // PEFT 0.17 on
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

// An adapter's PEFT name: "base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight"
// (layer i = block i + 1). A sparse layer's expert adapters (Note [Expert adapters]) are on
// the module transformers names "mlp.experts" (Mixtral's too), where PEFT nests one wrapper
// per targeted tensor in their order there: gate_up_proj's under "base_layer." when
// down_proj is targeted as well.
std::string PeftName(const Consolidator& c, int block, const std::string& name) {
  const model::LoraConfig& l = c.model().lora;
  for (const char* tensor : model::kLoraExpertTensors) {
    const std::string fused = fmt::format(".experts.{}.", tensor);
    const size_t at = name.find(fused);
    if (at == std::string::npos) continue;
    const bool nested = std::string(tensor) == "gate_up_proj" && l.TargetsExperts("down_proj");
    return fmt::format("base_model.model.model.layers.{}.mlp.experts.{}{}.weight", block - 1, nested ? "base_layer." : "",
                       name.substr(at + fused.size()));
  }
  return "base_model.model." + ToHfName(/*gpt2=*/false, static_cast<int>(c.model().n_layer), block, name).name + ".weight";
}

// Every adapter of the checkpoint under PEFT's saved names (PeftName).
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
      STRATA_ASSIGN_OR_RETURN(ExportedTensor t,
                              c.Extract(flat, p, PeftName(c, flat.block, name), /*transpose=*/false, dtype));
      out->push_back(std::move(t));
    }
  }
  return Status();
}

StatusOr<ExportReport> Peft(const std::string& checkpoint, const std::string& out, const PeftOptions& o) {
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  STRATA_RETURN_IF_ERROR(CheckExportTarget(out, checkpoint, c.step_dir(), c.manifest(), o.source, o.overwrite));
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
  int64_t experts = 0;
  for (const ExportedTensor& t : tensors) experts += t.view.name.find(".mlp.experts.") != std::string::npos;
  std::vector<std::string> kinds;
  if (rep.tensors > experts)
    kinds.push_back(fmt::format("lora_A [r, in] and lora_B [out, r] of {} projections", (rep.tensors - experts) / 2));
  if (experts > 0)
    kinds.push_back(fmt::format("lora_A [r x experts, in] and lora_B [out, r x experts] of {} fused expert tensors "
                                "(PEFT >= 0.17's target_parameters)", experts / 2));
  rep.details.push_back(fmt::format("adapter_model.safetensors: {}", fmt::join(kinds, "; ")));
  rep.details.push_back(fmt::format("load: peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({}), "
                                    "\"{}\")", rep.source.empty() ? "BASE" : nlohmann::json(rep.source).dump(), f.target()));
  return rep;
}

}  // namespace

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
  int64_t merged = 0, fused = 0;
  for (const nlohmann::json& blk : c.manifest()["layout"])
    for (const nlohmann::json& p : blk.at("params")) {
      const std::string name = p.at("name").get<std::string>();
      if (!name.ends_with(".lora_A")) continue;
      (name.find(".experts.") != std::string::npos ? fused : merged) += 1;
    }
  const model::LoraConfig& l = c.model().lora;
  std::vector<std::string> into;
  if (merged > 0) into.push_back(fmt::format("{} projections", merged));
  if (fused > 0) into.push_back(fmt::format("the experts of {} fused tensors", fused));
  rep->details.push_back(fmt::format("merged the LoRA adapters ({}) into {}: W + {} * B @ A", Summary(l),
                                     fmt::join(into, " and "), l.scale()));
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
