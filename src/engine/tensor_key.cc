#include "src/engine/tensor_key.h"

#include <charconv>

#include <fmt/format.h>

namespace strata {
namespace {

const char* RoleSuffix(TensorRole r) {
  switch (r) {
    case TensorRole::kWorking: return "working";
    case TensorRole::kMaster: return "master";
    case TensorRole::kAdamM: return "adam_m";
    case TensorRole::kAdamV: return "adam_v";
    case TensorRole::kAdapter: return "adapter";
  }
  return "?";
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

}  // namespace

std::string TensorKey::Name() const {
  if (role == TensorRole::kWorking) return fmt::format("block{}.working", block);
  if (role == TensorRole::kAdapter) return fmt::format("block{}.adapter", block);
  return fmt::format("block{}.{}.{}", block, offset, RoleSuffix(role));
}

std::optional<TensorKey> TensorKey::Parse(std::string_view name) {
  if (name.substr(0, 5) != "block") return std::nullopt;
  name.remove_prefix(5);
  const size_t dot = name.find('.');
  int64_t block = 0;
  if (dot == std::string_view::npos || !ParseInt(name.substr(0, dot), &block) || block > (1 << 30))
    return std::nullopt;
  const std::string_view rest = name.substr(dot + 1);
  if (rest == "working") return TensorKey{static_cast<int>(block), TensorRole::kWorking, 0};
  if (rest == "adapter") return TensorKey{static_cast<int>(block), TensorRole::kAdapter, 0};
  const size_t dot2 = rest.find('.');
  int64_t offset = 0;
  if (dot2 == std::string_view::npos || !ParseInt(rest.substr(0, dot2), &offset)) return std::nullopt;
  const std::string_view suffix = rest.substr(dot2 + 1);
  for (TensorRole r : kStateRoles)
    if (suffix == RoleSuffix(r)) return TensorKey{static_cast<int>(block), r, offset};
  return std::nullopt;
}

}  // namespace strata
