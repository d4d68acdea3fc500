// ExportHfFolder (export.h): a checkpoint as a Hugging Face model folder (a LoRA checkpoint
// as its merged model).
#include <filesystem>

#include "src/base/input_file.h"
#include "src/base/json_text.h"

#include "src/hf/consolidate.h"
#include "src/base/durable_file.h"
#include "src/hf/export.h"
#include "src/hf/export_target.h"
#include "src/hf/fused_tensors.h"
#include "src/hf/lora_export.h"
#include "src/model/hf_config.h"

namespace strata::ckpt {
namespace fs = std::filesystem;
namespace {

// What a model folder carries besides config.json and the weights (transformers'
// tokenizers, sentencepiece models, chat templates, generation defaults).
constexpr const char* kSideFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                      "tokenizer.model",    "vocab.json",            "merges.txt",
                                      "vocab.txt",          "added_tokens.json",     "chat_template.jinja",
                                      "chat_template.json", "generation_config.json"};

// Tokenizer files run to tens of megabytes (large vocabularies); a FIFO or a device is refused.
constexpr uint64_t kMaxSideFileBytes = 1ull << 30;

// config.json keys that Strata writes itself; a source's own spelling of them goes (rope
// settings have two spellings, transformers 4's and 5's, that must not both appear).
constexpr const char* kReplacedKeys[] = {"rope_parameters", "rope_scaling", "rope_theta", "dtype", "torch_dtype"};

const char* TorchDTypeName(ExportDType d) {
  return d == ExportDType::kF32 ? "float32" : d == ExportDType::kBF16 ? "bfloat16" : "float16";
}

Status WriteConfig(const Consolidator& c, const std::string& source, OutFolder& out, ExportDType dtype) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const std::string src_config = (fs::path(source) / "config.json").string();
  std::error_code ec;
  if (!source.empty() && fs::exists(src_config, ec)) {
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadInputFile(src_config, kMaxConfigFileBytes, "a config.json"));
    STRATA_ASSIGN_OR_RETURN(config, ParseOrderedJsonText(text, "'" + src_config + "'"));
    if (!config.is_object()) return InvalidArgument("'{}': not a JSON object", src_config);
    for (const char* k : kReplacedKeys) config.erase(k);
  }
  config.update(model::HfConfigJson(c.model(), TorchDTypeName(dtype)));
  // Phi3Config's pad_token_id defaults to 32000, an embedding row a small vocabulary lacks:
  // without a source's own, none.
  if (model::HfModelType(c.model()) == "phi3" && !config.contains("pad_token_id")) config["pad_token_id"] = nullptr;
  return out.Write("config.json", config.dump(2) + "\n");
}

// The weights: shards planned from the manifest (so every name knows M), then filled block
// by block and written as each one completes.
Status WriteShards(const Consolidator& c, const HfFolderOptions& o, OutFolder& out, ExportReport* rep) {
  std::vector<PlannedTensor> plan = c.Plan(o.dtype);
  STRATA_RETURN_IF_ERROR(FuseHfPlan(c.model(), &plan));
  std::vector<int> shard_of(plan.size());
  uint64_t in_shard = 0, total = 0;
  int shards = plan.empty() ? 0 : 1;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (in_shard > 0 && in_shard + plan[i].bytes > o.max_shard_bytes) {
      ++shards;
      in_shard = 0;
    }
    in_shard += plan[i].bytes;
    total += plan[i].bytes;
    shard_of[i] = shards - 1;
  }
  auto name = [&](int s) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards); };
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<ExportedTensor> pending;
  size_t next = 0;  // index in plan of the next tensor produced
  for (int b = 0; b < c.num_blocks(); ++b) {
    STRATA_ASSIGN_OR_RETURN(std::vector<ExportedTensor> block, c.Block(b, o.dtype));
    STRATA_RETURN_IF_ERROR(FuseHfTensors(c.model(), &block));
    for (ExportedTensor& t : block) {
      const int s = shard_of[next];
      weight_map[t.view.name] = name(s);
      rep->parameters += t.numel;
      pending.push_back(std::move(t));
      if (++next < plan.size() && shard_of[next] == s) continue;
      std::vector<TensorView> views;
      for (const ExportedTensor& p : pending) views.push_back(p.view);
      uint64_t bytes = 0;
      STRATA_RETURN_IF_ERROR(WriteSafetensors(out.Path(name(s)), views, ExportMetadata(), &bytes));
      rep->bytes += bytes;
      rep->tensors += static_cast<int64_t>(views.size());
      pending.clear();
    }
  }
  rep->shards = shards;
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return out.Write("model.safetensors.index.json", index.dump(2) + "\n");
}

Status CopySideFiles(const std::string& source, OutFolder& out, ExportReport* rep) {
  std::error_code ec;
  for (const char* f : kSideFiles) {
    const std::string from = (fs::path(source) / f).string();
    if (!fs::is_regular_file(from, ec)) continue;
    STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadInputFile(from, kMaxSideFileBytes, "a tokenizer file"));
    STRATA_RETURN_IF_ERROR(out.Write(f, bytes));
    rep->copied.push_back(f);
  }
  return Status();
}

StatusOr<ExportReport> Export(const std::string& checkpoint, const std::string& out, const HfFolderOptions& o) {
  if (o.max_shard_bytes == 0) return InvalidArgument("the maximum shard size must be positive");
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  STRATA_RETURN_IF_ERROR(CheckExportTarget(out, checkpoint, c.step_dir(), c.manifest(), o.source, o.overwrite));
  STRATA_RETURN_IF_ERROR(CheckLoraMerge(c, o.merge_lora, /*single_file=*/false));
  ExportReport rep;
  rep.step_dir = c.step_dir();
  rep.step = c.manifest()["step"].get<int64_t>();
  STRATA_ASSIGN_OR_RETURN(rep.source, SourceFolder(c.manifest(), o.source, "no tokenizer files copied", &rep.notes));
  if (c.lora()) DescribeMerge(c, &rep);
  STRATA_ASSIGN_OR_RETURN(OutFolder f, OutFolder::Make(out, "a model folder", o.overwrite));
  STRATA_RETURN_IF_ERROR(WriteConfig(c, rep.source, f, o.dtype));
  STRATA_RETURN_IF_ERROR(WriteShards(c, o, f, &rep));
  if (!rep.source.empty()) STRATA_RETURN_IF_ERROR(CopySideFiles(rep.source, f, &rep));
  STRATA_RETURN_IF_ERROR(f.Publish());  // on any error above, f's destructor removes the temporary
  return rep;
}

}  // namespace

StatusOr<ExportReport> ExportHfFolder(const std::string& checkpoint, const std::string& out,
                                      const HfFolderOptions& options) {
  try {
    return Export(checkpoint, out, options);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", checkpoint, e.what());
  }
}

}  // namespace strata::ckpt
