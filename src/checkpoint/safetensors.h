// The safetensors format, read and written without LibTorch: an 8-byte little-endian header
// length N, N bytes of JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
// ..., "__metadata__": {string: string}}), then the raw little-endian tensor data; offsets
// are relative to the end of the header. Hugging Face's writer pads the header with spaces
// to a multiple of 8 bytes; so does this one.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "src/base/durable_file.h"
#include "strata/status.h"

namespace strata::ckpt {

// Bytes per element of a safetensors dtype name ("F32" 4, "BF16" 2, "F16" 2, "I64" 8, "U8" 1,
// ...), or 0 for a name this reader does not know.
int SafetensorsDTypeSize(const std::string& dtype);

struct TensorView {
  std::string name;
  std::string dtype;           // "F32", "BF16", ...
  std::vector<int64_t> shape;  // empty = scalar
  std::span<const std::byte> bytes;
  int64_t numel() const;
};

// Writes `tensors` (in this order) and `metadata` to `path` through `writer` semantics:
// the caller decides on the name (temporary or final); the file is fsynced and closed.
// Returns the file's size and xxh3-64 in *size / *xxh3 when they are non-null.
Status WriteSafetensors(const std::string& path, const std::vector<TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata, uint64_t* size = nullptr,
                        uint64_t* xxh3 = nullptr);

// A safetensors file mapped read-only and validated: the header parses, every tensor's
// byte range lies inside the file and matches dtype x shape. Errors name the file.
class SafetensorsFile {
 public:
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates an already mapped file (e.g. one whose checksum the caller has just checked).
  static StatusOr<SafetensorsFile> FromMapping(MappedFile file);

  const std::vector<TensorView>& tensors() const { return tensors_; }  // file order
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }
  // Where a tensor's bytes start in the file (for readers that map or read them later).
  uint64_t FileOffset(const TensorView& t) const { return static_cast<uint64_t>(t.bytes.data() - file_.bytes().data()); }

 private:
  explicit SafetensorsFile(MappedFile f) : file_(std::move(f)) {}
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace strata::ckpt
