// `strata export CKPT --out DIR`: consolidates a sharded checkpoint into a Hugging Face
// model folder (config.json, sharded safetensors with their index, the source folder's
// tokenizer files) that transformers' from_pretrained loads; `--out FILE.safetensors`
// writes the weights alone as one file (DeepSpeed's zero_to_fp32). A LoRA checkpoint
// (strata.lora) becomes a PEFT adapter folder, or with --merge-lora the merged model in
// either form.
#include <cstdio>

#include "src/hf/export.h"
#include "src/cli/commands.h"
#include "src/cli/stop_on_signal.h"

namespace strata::cli {
namespace {

// "5GB", "500MB", "100KB", "12345" (bytes), as transformers' max_shard_size (powers of 1000).
StatusOr<uint64_t> ParseSize(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    return InvalidArgument("--max-shard-size '{}': expected a size such as 5GB, 200MB or 1000000", s);
  }
  const std::string unit = s.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1 : unit == "KB" ? 1e3 : unit == "MB" ? 1e6 : unit == "GB" ? 1e9 : -1;
  if (scale < 0 || !(v > 0)) return InvalidArgument("--max-shard-size '{}': expected a size such as 5GB, 200MB or 1000000", s);
  return static_cast<uint64_t>(v * scale);
}

}  // namespace

void AddExportCommand(CLI::App& app, Action* action) {
  struct Args {
    std::string checkpoint, out, dtype = "fp32", max_shard_size = "5GB", hf_source;
    bool merge_lora = false, overwrite = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("export", "consolidate a checkpoint's shards into a Hugging Face model folder (or one "
                                           "safetensors file); loads with from_pretrained and --init-from. A LoRA "
                                           "checkpoint: a PEFT adapter folder, or the merged model (--merge-lora)");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder (its latest step) or a step folder")->required();
  cmd->add_option("--out", a->out, "output folder (config.json, model-0000N-of-0000M.safetensors, index, tokenizer "
                                   "files), or a FILE.safetensors for the weights alone; LoRA: the PEFT "
                                   "adapter folder (adapter_config.json, adapter_model.safetensors)")->required();
  auto* dtype_opt = cmd->add_option("--dtype", a->dtype, "fp32 (default; bf16 for a model merged onto an NF4 base), "
                                                      "bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  auto* shard_opt = cmd->add_option("--max-shard-size", a->max_shard_size, "folder: largest safetensors shard (default "
                                                                         "5GB, as transformers)");
  cmd->add_option("--hf-source", a->hf_source, "folder: the Hugging Face folder to copy tokenizer files from, or that a "
                                               "PEFT adapter names as its base (default: the one the checkpoint records, "
                                               "strata.model.from / --init-from DIR)");
  cmd->add_flag("--merge-lora", a->merge_lora, "LoRA checkpoint: write the merged model (W + alpha/r * B @ A, the base "
                                               "in the run's compute dtype) instead of a PEFT adapter folder");
  cmd->add_flag("--overwrite", a->overwrite, "replace --out even if strata export did not write it (by default an "
                                             "existing output is replaced only when it is an earlier export's, with "
                                             "nothing added since)");
  cmd->callback([=] {
    *action = [=] {
      StopOnSignals();  // a stopped export removes its temporary output
      const bool file = a->out.ends_with(".safetensors");
      bool peft = false;
      auto run = [&]() -> StatusOr<ckpt::ExportReport> {
        STRATA_ASSIGN_OR_RETURN(const model::LoraConfig lora_config, ckpt::CheckpointLora(a->checkpoint));
        const bool lora = lora_config.enabled();
        // QLoRA: the merged weights are no longer on the NF4 grid; bf16 as QLoRA's recipes merge.
        if (a->merge_lora && lora_config.nf4_base() && dtype_opt->count() == 0) a->dtype = "bf16";
        const ckpt::ExportDType dtype = a->dtype == "bf16"   ? ckpt::ExportDType::kBF16
                                        : a->dtype == "fp16" ? ckpt::ExportDType::kF16
                                                             : ckpt::ExportDType::kF32;
        if (a->merge_lora && !lora)
          return InvalidArgument("--merge-lora: '{}' has no LoRA adapters (its run had no strata.lora); drop the flag",
                                 a->checkpoint);
        if (file) return ckpt::ExportCheckpoint(a->checkpoint, a->out, dtype, a->merge_lora, a->overwrite);
        if (lora && !a->merge_lora) {
          peft = true;
          return ckpt::ExportPeftAdapter(a->checkpoint, a->out, {dtype, a->hf_source, a->overwrite});
        }
        STRATA_ASSIGN_OR_RETURN(uint64_t size, ParseSize(a->max_shard_size));
        return ckpt::ExportHfFolder(a->checkpoint, a->out, {dtype, size, a->hf_source, a->merge_lora, a->overwrite});
      };
      StatusOr<ckpt::ExportReport> r = run();
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str());
        return 1;
      }
      if (peft && shard_opt->count() > 0)
        std::fprintf(stderr, "note: --max-shard-size does not apply to a PEFT adapter folder (one "
                             "adapter_model.safetensors)\n");
      for (const std::string& n : r->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
      std::printf("exported %s%s (step %lld): %lld tensors, %.2f M parameters, %s, %.1f MB",
                  peft ? "the LoRA adapter of " : "", r->step_dir.c_str(), (long long)r->step, (long long)r->tensors,
                  r->parameters / 1e6, a->dtype.c_str(), r->bytes / 1e6);
      if (r->shards > 0) std::printf(" in %d shard(s)", r->shards);
      std::printf(" -> %s\n", a->out.c_str());
      for (const std::string& d : r->details) std::printf("%s\n", d.c_str());
      if (!r->source.empty() && !peft) {
        std::string files;
        for (const std::string& f : r->copied) files += (files.empty() ? "" : ", ") + f;
        std::printf("copied from %s: %s\n", r->source.c_str(), files.empty() ? "(no tokenizer files there)" : files.c_str());
      }
      return 0;
    };
  });
}

}  // namespace strata::cli
