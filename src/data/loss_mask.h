// Loss-mask files, without LibTorch (the fuzzers and tools can use it). A loss mask says,
// token by token, whether a token is trained on: byte i of the mask belongs to token i of
// the token file (after an llm.c header, when there is one), 1 = the token is a target the
// loss counts (a completion or an assistant turn), 0 = context only (a prompt, a system or
// user turn, padding). The file holds nothing else: exactly one byte per token, each 0 or
// 1. scripts/prepare_data.py writes it next to the token file as TOKENS.mask.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/data_config.h"
#include "strata/status.h"

namespace strata::data {

// The mask file of `config` ("" = none): DataConfig::loss_mask resolved ("auto": the
// token file's sibling PATH.mask when it exists; "none": none; else that file).
std::string ResolveLossMaskPath(const DataConfig& config);

// Bytes -> mask of `tokens` entries. Errors name both files: a length other than one byte
// per token, a byte other than 0 or 1 (with its position).
// The validation file's mask (strata.data.eval_path): EVAL_PATH.mask when it exists, unless
// loss_mask is "none"; "" for none.
std::string ResolveEvalLossMaskPath(const DataConfig& config);

Status DecodeLossMask(std::string_view bytes, size_t tokens, const std::string& mask_path,
                      const std::string& token_path, std::vector<uint8_t>& mask);

}  // namespace strata::data
