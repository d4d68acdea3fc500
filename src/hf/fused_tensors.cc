#include "src/hf/fused_tensors.h"

#include <fmt/format.h>

#include <map>
#include <optional>

#include "src/model/hf_names.h"

namespace strata::ckpt {
namespace {

constexpr size_t kUnseen = static_cast<size_t>(-1);

// One fused group's parts: their indices in the list, by part (kUnseen: not in it), and where
// the joined tensor goes (its first part's index).
struct Group {
  std::vector<size_t> at;
  size_t first = 0;
};

template <typename T, typename NameOf, typename Join>
Status Fuse(const model::ModelConfig& config, std::vector<T>* items, NameOf name_of, Join join) {
  std::map<std::string, Group> groups;
  std::vector<std::optional<model::FusedRows>> rows(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    rows[i] = model::FusedRowsOf(config, name_of((*items)[i]));
    if (!rows[i]) continue;
    Group& g = groups[rows[i]->fused];
    if (g.at.empty()) {
      g.at.assign(static_cast<size_t>(rows[i]->parts), kUnseen);
      g.first = i;
    }
    g.at[static_cast<size_t>(rows[i]->part)] = i;
  }
  if (groups.empty()) return Status();
  std::vector<T> out;
  out.reserve(items->size());
  for (size_t i = 0; i < items->size(); ++i) {
    if (!rows[i]) {
      out.push_back(std::move((*items)[i]));
      continue;
    }
    const Group& g = groups.at(rows[i]->fused);
    if (g.first != i) continue;  // joined at its group's first part
    std::vector<T*> parts;
    for (size_t at : g.at) {
      if (at == kUnseen)
        return Error(StatusCode::kDataLoss, "'{}' cannot be written: one of the projections it joins is missing",
                     rows[i]->fused);
      parts.push_back(&(*items)[at]);
    }
    STRATA_ASSIGN_OR_RETURN(T joined, join(rows[i]->fused, parts));
    out.push_back(std::move(joined));
  }
  *items = std::move(out);
  return Status();
}

}  // namespace

Status FuseHfTensors(const model::ModelConfig& config, std::vector<ExportedTensor>* tensors) {
  return Fuse(config, tensors, [](const ExportedTensor& t) { return t.view.name; },
              [](const std::string& name, const std::vector<ExportedTensor*>& parts) -> StatusOr<ExportedTensor> {
                ExportedTensor t;
                std::vector<int64_t> shape = parts[0]->view.shape;
                shape[0] = 0;
                for (const ExportedTensor* p : parts) {
                  if (p->view.shape.size() != 2 || p->view.shape[1] != parts[0]->view.shape[1] ||
                      p->view.dtype != parts[0]->view.dtype)
                    return Error(StatusCode::kInternal, "'{}': its parts differ in columns or dtype", name);
                  t.bytes.insert(t.bytes.end(), p->bytes.begin(), p->bytes.end());  // rows stacked
                  t.numel += p->numel;
                  shape[0] += p->view.shape[0];
                }
                t.view = {name, parts[0]->view.dtype, shape, {}};
                t.view.bytes = t.bytes;
                return t;
              });
}

Status FuseHfPlan(const model::ModelConfig& config, std::vector<PlannedTensor>* plan) {
  return Fuse(config, plan, [](const PlannedTensor& t) { return t.name; },
              [](const std::string& name, const std::vector<PlannedTensor*>& parts) -> StatusOr<PlannedTensor> {
                PlannedTensor t{name, parts[0]->shape, 0};
                t.shape[0] = 0;
                for (const PlannedTensor* p : parts) {
                  t.shape[0] += p->shape[0];
                  t.bytes += p->bytes;
                }
                return t;
              });
}

}  // namespace strata::ckpt
