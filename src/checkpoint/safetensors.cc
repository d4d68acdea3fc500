#include "src/checkpoint/safetensors.h"
#include "src/config/json_reader.h"

#include "strata/check.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace strata::ckpt {

int SafetensorsDTypeSize(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n)) return -1;  // only for a view no reader accepted
  return n;
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata, uint64_t* size, uint64_t* xxh3) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    const int es = SafetensorsDTypeSize(t.dtype);
    STRATA_CHECK(es > 0) << "unknown safetensors dtype " << t.dtype;
    STRATA_CHECK(static_cast<uint64_t>(t.numel()) * es == t.bytes.size())
        << t.name << ": " << t.bytes.size() << " bytes for " << t.numel() << " x " << es;
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", nlohmann::ordered_json::array({offset, offset + t.bytes.size()})}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(path));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(len))));
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(text.data(), text.size()))));
  for (const TensorView& t : tensors) STRATA_RETURN_IF_ERROR(w.Write(t.bytes));
  if (size) *size = w.bytes_written();
  if (xxh3) *xxh3 = w.xxh3();
  return w.Close();
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  return FromMapping(std::move(m));
}

namespace {

// One header entry: dtype, shape and data_offsets checked against the data region; "" when
// it holds, else what is wrong (naming the tensor).
std::string ParseEntry(const std::string& name, const nlohmann::json& entry, std::span<const std::byte> data,
                       TensorView* t) {
  t->name = name;
  t->dtype = entry.at("dtype").get<std::string>();
  // Integers only: converting 3e19 (a float) to an integer is undefined behaviour.
  auto integers = [](const nlohmann::json& a) {
    return a.is_array() && std::all_of(a.begin(), a.end(), [](const nlohmann::json& x) {
             return x.is_number_unsigned() || (x.is_number_integer() && x.get<int64_t>() >= 0);
           });
  };
  if (!integers(entry.at("shape")) || !integers(entry.at("data_offsets")))
    return fmt::format("tensor '{}': shape and data_offsets must be lists of non-negative integers", t->name);
  for (const nlohmann::json& d : entry.at("shape")) {
    if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return fmt::format("tensor '{}': a dimension of {} is too large", t->name, d.dump());
    t->shape.push_back(d.get<int64_t>());
  }
  const auto off = entry.at("data_offsets").get<std::vector<uint64_t>>();
  const int es = SafetensorsDTypeSize(t->dtype);
  if (es == 0) return fmt::format("tensor '{}' has unknown dtype '{}'", t->name, t->dtype);
  if (off.size() != 2 || off[0] > off[1] || off[1] > data.size())
    return fmt::format("tensor '{}': data_offsets outside the file's {} data bytes (truncated?)", t->name,
                       data.size());
  uint64_t elements = 1;  // the shape's product, refused before it could wrap around
  bool sane = true;
  for (int64_t d : t->shape) {
    sane = sane && d >= 0 && (d == 0 || elements <= (data.size() + 1) / static_cast<uint64_t>(d));
    if (sane) elements *= static_cast<uint64_t>(d);
  }
  if (!sane || elements * es != off[1] - off[0])
    return fmt::format("tensor '{}': {} bytes do not hold {} x {} elements", t->name, off[1] - off[0],
                       sane ? std::to_string(elements) : std::string("more than the file's"), t->dtype);
  t->bytes = data.subspan(off[0], off[1] - off[0]);
  return "";
}

}  // namespace

StatusOr<SafetensorsFile> SafetensorsFile::FromMapping(MappedFile m) {
  SafetensorsFile f(std::move(m));
  const std::string& path = f.path();
  const auto all = f.file_.bytes();
  auto bad = [&](const std::string& why) {
    return Error(StatusCode::kDataLoss, "'{}' is not a valid safetensors file: {}", path, why);
  };
  if (all.size() < 8) return bad(fmt::format("{} bytes, shorter than the 8-byte header length", all.size()));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(all[i])) << (8 * i);
  if (n > all.size() - 8) return bad(fmt::format("header length {} exceeds the file ({} bytes)", n, all.size()));
  StatusOr<nlohmann::json> parsed =
      ParseJsonText(std::string_view(reinterpret_cast<const char*>(all.data() + 8), n), "header");
  if (!parsed.ok()) return bad(parsed.status().message());
  nlohmann::json header = *std::move(parsed);
  if (!header.is_object()) return bad("header is not a JSON object");
  const auto data = all.subspan(8 + n);
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        for (auto m2 = it->begin(); m2 != it->end(); ++m2)
          if (m2->is_string()) f.metadata_[m2.key()] = m2->get<std::string>();
        continue;
      }
      TensorView t;
      if (std::string problem = ParseEntry(it.key(), *it, data, &t); !problem.empty()) return bad(problem);
      f.index_[t.name] = f.tensors_.size();
      f.tensors_.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(fmt::format("malformed tensor entry ({})", e.what()));
  }
  // Hugging Face's files list tensors alphabetically in the header; keep data order.
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorView& a, const TensorView& b) {
    return a.bytes.data() != b.bytes.data() ? a.bytes.data() < b.bytes.data() : a.bytes.size() < b.bytes.size();
  });
  // As Hugging Face's reader: the tensors tile the data region, no byte shared, none left over.
  const std::byte* next = data.data();
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    const TensorView& t = f.tensors_[i];
    if (t.bytes.data() != next)
      return bad(fmt::format("tensor '{}' starts at data byte {}, not where {} ends (byte {}): tensors {}", t.name,
                             t.bytes.data() - data.data(), i ? "'" + f.tensors_[i - 1].name + "'" : "nothing",
                             next - data.data(), t.bytes.data() < next ? "overlap" : "leave a gap"));
    next += t.bytes.size();
    f.index_[t.name] = i;
  }
  if (next != data.data() + data.size())
    return bad(fmt::format("{} data bytes after the last tensor", data.data() + data.size() - next));
  return f;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace strata::ckpt
