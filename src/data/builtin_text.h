// Folder-private: the built-in corpus without LibTorch, so builtin_text.cc compiles fast.
// The same function is declared in data.h for users.
#pragma once

#include <string>

namespace strata::data {

const std::string& BuiltinText();

}  // namespace strata::data
