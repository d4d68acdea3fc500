#include "src/hf/export.h"

#include <cstdio>
#include <filesystem>

#include "src/hf/consolidate.h"
#include "src/hf/export_target.h"
#include "src/hf/fused_tensors.h"
#include "src/hf/lora_export.h"

namespace strata::ckpt {
namespace {

StatusOr<ExportReport> Export(const std::string& checkpoint, const std::string& out, ExportDType dtype, bool merge_lora,
                              bool overwrite) {
  STRATA_ASSIGN_OR_RETURN(Consolidator c, Consolidator::Open(checkpoint));
  STRATA_RETURN_IF_ERROR(CheckExportTarget(out, checkpoint, c.step_dir(), c.manifest(), "", overwrite));
  STRATA_ASSIGN_OR_RETURN(OutFile f, OutFile::Make(out, overwrite));  // before the work: a refusal comes at once
  STRATA_RETURN_IF_ERROR(CheckLoraMerge(c, merge_lora, /*single_file=*/true));
  ExportReport rep;
  rep.step_dir = c.step_dir();
  rep.step = c.manifest()["step"].get<int64_t>();
  if (c.lora()) DescribeMerge(c, &rep);
  std::vector<ExportedTensor> all;
  for (int i = 0; i < c.num_blocks(); ++i) {
    STRATA_ASSIGN_OR_RETURN(std::vector<ExportedTensor> block, c.Block(i, dtype));
    STRATA_RETURN_IF_ERROR(FuseHfTensors(c.model(), &block));
    for (ExportedTensor& t : block) {
      rep.parameters += t.numel;
      all.push_back(std::move(t));
    }
  }
  std::vector<TensorView> views;
  for (const ExportedTensor& t : all) views.push_back(t.view);
  rep.tensors = static_cast<int64_t>(views.size());
  STRATA_RETURN_IF_ERROR(WriteSafetensors(f.tmp(), views, ExportMetadata(), &rep.bytes));
  STRATA_RETURN_IF_ERROR(f.Publish());  // on any error above, f's destructor removes the temporary
  return rep;
}

}  // namespace

StatusOr<ExportReport> ExportCheckpoint(const std::string& checkpoint, const std::string& out, ExportDType dtype,
                                        bool merge_lora, bool overwrite) {
  try {  // ReadManifest checks what export reads; a model section is read by key here
    return Export(checkpoint, out, dtype, merge_lora, overwrite);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", checkpoint, e.what());
  }
}

}  // namespace strata::ckpt
