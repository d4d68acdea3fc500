#include "src/data/loss_mask.h"

#include <filesystem>

namespace strata::data {

std::string ResolveLossMaskPath(const DataConfig& config) {
  if (config.loss_mask == "none" || config.loss_mask.empty()) return "";
  if (config.loss_mask != "auto") return config.loss_mask;
  if (config.path.empty()) return "";  // the built-in text has no mask
  const std::string sibling = config.path + ".mask";
  std::error_code ec;
  return std::filesystem::exists(sibling, ec) ? sibling : "";
}

std::string ResolveEvalLossMaskPath(const DataConfig& config) {
  if (config.loss_mask == "none" || config.loss_mask.empty() || config.eval_path.empty()) return "";
  const std::string sibling = config.eval_path + ".mask";
  std::error_code ec;
  return std::filesystem::exists(sibling, ec) ? sibling : "";
}

Status DecodeLossMask(std::string_view bytes, size_t tokens, const std::string& mask_path,
                      const std::string& token_path, std::vector<uint8_t>& mask) {
  if (bytes.size() != tokens) {
    return InvalidArgument(
        "loss mask '{}' has {} bytes but token file '{}' has {} tokens: the mask needs exactly one byte per token "
        "(were they written by different runs of scripts/prepare_data.py?)",
        mask_path, bytes.size(), token_path, tokens);
  }
  mask.resize(tokens);
  for (size_t i = 0; i < tokens; ++i) {
    const auto v = static_cast<uint8_t>(bytes[i]);
    if (v > 1) return InvalidArgument("loss mask '{}': byte {} at position {} is neither 0 nor 1", mask_path, v, i);
    mask[i] = v;
  }
  return Status::Ok();
}

}  // namespace strata::data
