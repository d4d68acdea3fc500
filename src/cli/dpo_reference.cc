// DPO's reference log-probabilities beside the data (dpo_reference.h).
#include "src/cli/dpo_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "src/base/durable_file.h"
#include "src/model/hf_config.h"

namespace strata::cli {
namespace {

constexpr char kMagic[] = "STRATA-REFLOGPS\n";
constexpr size_t kMagicBytes = 16;

// A file or folder as its files' names, sizes and modification times (the initial weights, the
// data): what changes when they are written again.
nlohmann::json FilesOf(const std::string& path) {
  namespace fs = std::filesystem;
  nlohmann::json out = nlohmann::json::array();
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
  } else if (!path.empty()) {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const auto size = fs::file_size(f, ec);
    const auto time = fs::last_write_time(f, ec).time_since_epoch().count();
    out.push_back({f.filename().string(), ec ? 0 : size, ec ? 0 : static_cast<int64_t>(time)});
  }
  return out;
}

uint64_t HashOf(const std::string& text) { return Xxh3(std::as_bytes(std::span(text.data(), text.size()))); }

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Take(std::string_view* in, T* v) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(v, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

// The file's rows when it is the reference of `identity` (`any_identity`: whatever it says it
// is, a checkpoint's copy being the run's own); an error says why not.
StatusOr<std::vector<double>> ReadReference(const std::string& path, const std::string& identity, int64_t rows,
                                            bool any_identity = false) {
  STRATA_ASSIGN_OR_RETURN(std::string bytes, ReadTextFile(path));
  std::string_view in(bytes);
  uint64_t hash = 0, count = 0;
  uint32_t length = 0;
  if (!in.starts_with(std::string_view(kMagic, kMagicBytes)))
    return InvalidArgument("'{}' is not a file of reference log-probabilities", path);
  in.remove_prefix(kMagicBytes);
  if (!Take(&in, &hash) || !Take(&in, &count) || !Take(&in, &length) || in.size() < length)
    return InvalidArgument("'{}' is cut short in its header", path);
  const std::string_view text = in.substr(0, length);
  in.remove_prefix(length);
  if (!any_identity && (text != identity || hash != HashOf(identity)))
    return InvalidArgument("'{}' holds the reference of another model or data:\n  its: {}\n  this run's: {}", path, text,
                           identity);
  if (static_cast<int64_t>(count) != rows || in.size() != static_cast<size_t>(rows) * sizeof(double))
    return InvalidArgument("'{}' holds {} rows ({} bytes of them), the data has {}", path, count, in.size(), rows);
  std::vector<double> logps(static_cast<size_t>(rows));
  std::memcpy(logps.data(), in.data(), in.size());
  return logps;
}

std::string EncodeReference(const std::string& identity, const std::vector<double>& logps) {
  std::string out(kMagic, kMagicBytes);
  Put<uint64_t>(&out, HashOf(identity));
  Put<uint64_t>(&out, logps.size());
  Put<uint32_t>(&out, static_cast<uint32_t>(identity.size()));
  out += identity;
  out.append(reinterpret_cast<const char*>(logps.data()), logps.size() * sizeof(double));
  return out;
}

// Whether every rank has `ok`: the ranks take one path together.
StatusOr<bool> EveryRank(Communicator& comm, bool ok) {
  float v = ok ? 1.0f : 0.0f;
  STRATA_RETURN_IF_ERROR(comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum));
  return v == static_cast<float>(comm.world_size());
}

}  // namespace

std::string DpoReferenceIdentity(const TrainConfig& c, const std::string& init_from, const data::TokenDataset& data) {
  nlohmann::ordered_json id;
  id["model"] = model::HfConfigJson(c.model, "float32");
  id["lora"] = c.model.lora.enabled();  // (adapters start at zero: the base is the initial model)
  id["init_from"] = init_from;
  id["init_files"] = FilesOf(init_from);
  if (init_from.empty()) id["seed"] = c.seed;
  id["seq_len"] = c.model.seq_len;
  id["data"] = DataConfigJson(c.data);
  id["data_files"] = {FilesOf(c.data.path), FilesOf(c.data.eval_path)};
  id["rows"] = {data.rows(data::Split::kTrain), data.rows(data::Split::kEval)};
  return id.dump();
}

std::string DpoReferencePath(const TrainConfig& c, const std::string& identity) {
  return fmt::format("{}.ref-{:016x}", c.data.path, HashOf(identity));
}

StatusOr<std::string> PrepareDpoReference(const DpoReferenceInputs& in, Engine& engine, Communicator& comm,
                                          const data::TokenDataset& data) {
  const std::string identity = DpoReferenceIdentity(in.config, in.init_from, data);
  const std::string beside = DpoReferencePath(in.config, identity);
  const int64_t rows = data.rows(data::Split::kTrain) + data.rows(data::Split::kEval);
  std::error_code ec;
  const std::string kept = in.step_dir.empty() ? "" : (std::filesystem::path(in.step_dir) / kDpoReferenceFile).string();
  const bool from_checkpoint = !kept.empty() && std::filesystem::exists(kept, ec);
  const std::string path = from_checkpoint ? kept : beside;
  StatusOr<std::vector<double>> read =
      std::filesystem::exists(path, ec)
          ? ReadReference(path, identity, rows, from_checkpoint)
          : StatusOr<std::vector<double>>(Error(StatusCode::kNotFound, "no file '{}'", path));
  STRATA_ASSIGN_OR_RETURN(const bool everyone, EveryRank(comm, read.ok()));
  if (everyone) {
    if (in.message) in.message(fmt::format("DPO reference log-probabilities of {} rows read from {}", rows, path));
    std::vector<double> logps = std::move(read).value();
    std::string bytes = EncodeReference(identity, logps);
    engine.SetDpoReference(std::move(logps));
    return bytes;
  }
  if (in.resuming)
    return read.status().WithContext(fmt::format(
        "a resumed DPO run compares with the initial model's log-probabilities, which the run wrote to '{}' when it "
        "started and its checkpoints keep as '{}' (its weights are no longer the initial ones): put that file back, "
        "or start the run again", beside, kDpoReferenceFile));
  if (in.message)
    in.message(fmt::format("DPO reference log-probabilities: one forward pass over {} rows with the initial weights",
                           rows));
  STRATA_ASSIGN_OR_RETURN(std::vector<double> logps, engine.RowLogProbs(data));
  // Some rank could not read it: every rank writes it (the same bytes; a temporary name each,
  // then renamed), so with node-local disks each node gets its copy.
  std::string bytes = EncodeReference(identity, logps);
  if (Status w = WriteFileAtomically(beside, bytes); !w.ok())
    return w.WithContext("writing the DPO reference log-probabilities");
  if (in.message && in.lead) in.message(fmt::format("DPO reference log-probabilities written to {}", beside));
  engine.SetDpoReference(std::move(logps));
  return bytes;
}

}  // namespace strata::cli
