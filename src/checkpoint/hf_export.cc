// ExportHfFolder (export.h): a checkpoint as a Hugging Face model folder.
#include <filesystem>

#include "src/checkpoint/consolidate.h"
#include "src/checkpoint/durable_file.h"
#include "src/checkpoint/export.h"
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

// config.json keys that Strata writes itself; a source's own spelling of them goes (rope
// settings have two spellings, transformers 4's and 5's, that must not both appear).
constexpr const char* kReplacedKeys[] = {"rope_parameters", "rope_scaling", "rope_theta", "dtype", "torch_dtype"};

const char* TorchDTypeName(ExportDType d) {
  return d == ExportDType::kF32 ? "float32" : d == ExportDType::kBF16 ? "bfloat16" : "float16";
}

Status WriteDurably(const std::string& path, std::string_view bytes) {
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(path));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(bytes.data(), bytes.size()))));
  return w.Close();
}

// The source folder: the option, else the manifest's record (a vanished one is a note).
StatusOr<std::string> SourceFolder(const Consolidator& c, const HfFolderOptions& o, ExportReport* rep) {
  std::error_code ec;
  if (!o.source.empty()) {
    if (!fs::is_directory(o.source, ec)) return Error(StatusCode::kNotFound, "--hf-source '{}' is not a folder", o.source);
    return o.source;
  }
  const std::string recorded = c.manifest().value("hf_source", std::string());
  if (recorded.empty()) return std::string();
  if (!fs::is_directory(recorded, ec)) {
    rep->notes.push_back(fmt::format("the checkpoint's source folder '{}' no longer exists: no tokenizer files copied "
                                     "(pass --hf-source DIR)", recorded));
    return std::string();
  }
  return recorded;
}

Status WriteConfig(const Consolidator& c, const std::string& source, const std::string& tmp, ExportDType dtype) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const std::string src_config = (fs::path(source) / "config.json").string();
  std::error_code ec;
  if (!source.empty() && fs::exists(src_config, ec)) {
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(src_config));
    config = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object())
      return InvalidArgument("'{}': not a JSON object", src_config);
    for (const char* k : kReplacedKeys) config.erase(k);
  }
  config.update(model::HfConfigJson(c.model(), TorchDTypeName(dtype)));
  return WriteDurably((fs::path(tmp) / "config.json").string(), config.dump(2) + "\n");
}

// The weights: shards planned from the manifest (so every name knows M), then filled block
// by block and written as each one completes.
Status WriteShards(const Consolidator& c, const HfFolderOptions& o, const std::string& tmp, ExportReport* rep) {
  const std::vector<PlannedTensor> plan = c.Plan(o.dtype);
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
    for (ExportedTensor& t : block) {
      const int s = shard_of[next];
      weight_map[t.view.name] = name(s);
      rep->parameters += t.numel;
      pending.push_back(std::move(t));
      if (++next < plan.size() && shard_of[next] == s) continue;
      std::vector<TensorView> views;
      for (const ExportedTensor& p : pending) views.push_back(p.view);
      uint64_t bytes = 0;
      STRATA_RETURN_IF_ERROR(WriteSafetensors((fs::path(tmp) / name(s)).string(), views, {{"format", "pt"}}, &bytes));
      rep->bytes += bytes;
      rep->tensors += static_cast<int64_t>(views.size());
      pending.clear();
    }
  }
  rep->shards = shards;
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteDurably((fs::path(tmp) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

Status CopySideFiles(const std::string& source, const std::string& tmp, ExportReport* rep) {
  std::error_code ec;
  for (const char* f : kSideFiles) {
    const std::string from = (fs::path(source) / f).string();
    if (!fs::is_regular_file(from, ec)) continue;
    STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadTextFile(from));
    STRATA_RETURN_IF_ERROR(WriteDurably((fs::path(tmp) / f).string(), bytes));
    rep->copied.push_back(f);
  }
  return Status();
}

// `tmp` (complete, fsynced) becomes `out`; a previous export there is moved aside first and
// removed after, so `out` is at every moment absent, the old folder or the new one.
Status Publish(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  const std::string old = out + ".old";
  if (fs::exists(out, ec)) {
    const bool replaceable = fs::is_directory(out, ec) && (fs::is_empty(out, ec) || fs::exists(fs::path(out) / "config.json", ec));
    if (!replaceable)
      return Error(StatusCode::kAlreadyExists, "'{}' exists and is not a model folder (no config.json): not replaced; "
                   "remove it or choose another --out", out);
    fs::remove_all(old, ec);
    if (::rename(out.c_str(), old.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", out, old);
  }
  if (::rename(tmp.c_str(), out.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", tmp, out);
  const std::string parent = fs::path(out).parent_path().string();
  STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  fs::remove_all(old, ec);
  return Status();
}

StatusOr<ExportReport> Export(const std::string& checkpoint, const std::string& out, const HfFolderOptions& o) {
  if (o.max_shard_bytes == 0) return InvalidArgument("the maximum shard size must be positive");
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  ExportReport rep;
  rep.step_dir = c.step_dir();
  rep.step = c.manifest()["step"].get<int64_t>();
  STRATA_ASSIGN_OR_RETURN(rep.source, SourceFolder(c, o, &rep));
  std::string tmp = out;
  while (!tmp.empty() && tmp.back() == '/') tmp.pop_back();
  const std::string target = tmp;
  tmp += ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);  // an export killed earlier
  if (!fs::create_directories(tmp, ec))
    return Error(StatusCode::kIoError, "cannot create '{}': {}", tmp, ec ? ec.message() : "it exists");
  Status s = WriteConfig(c, rep.source, tmp, o.dtype);
  if (s.ok()) s = WriteShards(c, o, tmp, &rep);
  if (s.ok() && !rep.source.empty()) s = CopySideFiles(rep.source, tmp, &rep);
  if (s.ok()) s = FsyncDir(tmp);
  if (s.ok()) s = Publish(tmp, target);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
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
