#include "src/checkpoint/export.h"

#include <cstdio>
#include <filesystem>

#include "src/checkpoint/consolidate.h"
#include "src/checkpoint/lora_export.h"

namespace strata::ckpt {
namespace {

StatusOr<ExportReport> Export(const std::string& checkpoint, const std::string& out, ExportDType dtype, bool merge_lora) {
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  STRATA_RETURN_IF_ERROR(CheckLoraMerge(c, merge_lora, /*single_file=*/true));
  ExportReport rep;
  rep.step_dir = c.step_dir();
  rep.step = c.manifest()["step"].get<int64_t>();
  if (c.lora()) DescribeMerge(c, &rep);
  std::vector<ExportedTensor> all;
  for (int i = 0; i < c.num_blocks(); ++i) {
    STRATA_ASSIGN_OR_RETURN(std::vector<ExportedTensor> block, c.Block(i, dtype));
    for (ExportedTensor& t : block) {
      rep.parameters += t.numel;
      all.push_back(std::move(t));
    }
  }
  std::vector<TensorView> views;
  for (const ExportedTensor& t : all) views.push_back(t.view);
  rep.tensors = static_cast<int64_t>(views.size());
  const std::string tmp = out + ".tmp";
  STRATA_RETURN_IF_ERROR(WriteSafetensors(tmp, views, {{"format", "pt"}}, &rep.bytes));
  if (::rename(tmp.c_str(), out.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", tmp, out);
  const std::string parent = std::filesystem::path(out).parent_path().string();
  STRATA_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  return rep;
}

}  // namespace

StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype,
                                        bool merge_lora) {
  try {  // ReadManifest checks what export reads; a model section is read by key here
    return Export(checkpoint, out, dtype, merge_lora);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", checkpoint, e.what());
  }
}

}  // namespace strata::ckpt
