// `strata export CKPT --out model.safetensors`: consolidates a sharded checkpoint into one
// safetensors file with Hugging Face names (DeepSpeed's zero_to_fp32).
#include <cstdio>

#include "src/checkpoint/export.h"
#include "src/cli/commands.h"

namespace strata::cli {

void AddExportCommand(CLI::App& app, Action* action) {
  struct Args {
    std::string checkpoint, out, dtype = "fp32";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("export", "consolidate a checkpoint's shards into one safetensors file (Hugging Face "
                                           "GPT-2 / LLaMA names; loads with from_pretrained and --init-from)");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder (its latest step) or a step folder")->required();
  cmd->add_option("--out", a->out, "output .safetensors file")->required();
  cmd->add_option("--dtype", a->dtype, "fp32 (default), bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->callback([=] {
    *action = [=] {
      auto r = ckpt::ExportCheckpoint(a->checkpoint, a->out,
                                      a->dtype == "bf16"   ? ckpt::ExportDType::kBF16
                                      : a->dtype == "fp16" ? ckpt::ExportDType::kF16
                                                           : ckpt::ExportDType::kF32);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str());
        return 1;
      }
      std::printf("exported %s (step %lld): %lld tensors, %.2f M parameters, %s, %.1f MB -> %s\n", r->step_dir.c_str(),
                  (long long)r->step, (long long)r->tensors, r->parameters / 1e6, a->dtype.c_str(), r->bytes / 1e6,
                  a->out.c_str());
      return 0;
    };
  });
}

}  // namespace strata::cli
