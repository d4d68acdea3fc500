// TorchCall: runs a LibTorch call, turning its exceptions into a Status (docs/STYLE.md rule 4).
#pragma once

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <exception>
#include <string>

#include "strata/status.h"

namespace strata {

template <typename F>
Status TorchCall(const std::string& what, F&& f) {
  try {
    f();
    return Status();
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace strata
