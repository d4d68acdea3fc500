// TensorBoard event records (tfevents.h).
#include "src/monitor/tfevents.h"

#include <array>
#include <cstring>

namespace strata::monitor {
namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli polynomial
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

// Protocol buffer encoding: a field's key, varints, fixed-width little-endian numbers.
void Varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void Key(std::string* out, int field, int wire_type) { Varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
template <class T>
void Fixed(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format is
  out->append(b, sizeof(T));
}
void Bytes(std::string* out, int field, std::string_view s) {
  Key(out, field, 2);
  Varint(out, s.size());
  out->append(s);
}

std::string EventHead(double wall_time, int64_t step) {
  std::string e;
  Key(&e, 1, 1);
  Fixed(&e, wall_time);
  if (step != 0) {
    Key(&e, 2, 0);
    Varint(&e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string TfRecord(std::string_view data) {
  std::string out, length;
  Fixed(&length, static_cast<uint64_t>(data.size()));
  out += length;
  Fixed(&out, MaskedCrc32c(length));
  out.append(data);
  Fixed(&out, MaskedCrc32c(data));
  return out;
}

std::string FileVersionEvent(double wall_time) {
  std::string e = EventHead(wall_time, 0);
  Bytes(&e, 3, "brain.Event:2");
  return e;
}

std::string ScalarEvent(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  Bytes(&v, 1, tag);
  Key(&v, 2, 5);
  Fixed(&v, value);
  std::string summary;
  Bytes(&summary, 1, v);
  std::string e = EventHead(wall_time, step);
  Bytes(&e, 5, summary);
  return e;
}

}  // namespace strata::monitor
