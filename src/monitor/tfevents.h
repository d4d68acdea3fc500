// TensorBoard's event files, written by hand: a TFRecord stream of Event protocol buffers,
// so that no protobuf or TensorFlow library is needed. Each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of the length | data | uint32 masked
//   CRC-32C of the data
// and each Event holds wall_time (field 1, double), step (2, int64) and either file_version
// (3, "brain.Event:2", the first record) or a Summary (5) with one Value {tag (1), simple_value
// (2, float)}: what TensorBoard's own reader (and torch.utils.tensorboard's writer) use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::monitor {

// CRC-32C (Castagnoli), and TFRecord's mask of it.
uint32_t Crc32c(std::string_view data);
uint32_t MaskedCrc32c(std::string_view data);

// One TFRecord around `data`.
std::string TfRecord(std::string_view data);

// The serialized Events.
std::string FileVersionEvent(double wall_time);
std::string ScalarEvent(double wall_time, int64_t step, std::string_view tag, float value);

}  // namespace strata::monitor
