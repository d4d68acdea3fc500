// STRATA_CHECK: invariants of Strata's own code. Always on (not assert), aborts with
// file:line and a message. Never use it for user input or the environment: those return
// a Status (status.h).
//
//   STRATA_CHECK(offset % align == 0) << "offset " << offset;
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace strata::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) { out_ << file << ":" << line << ": check failed: " << cond << " "; }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", out_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  std::ostringstream out_;
};

// Lets `STRATA_CHECK(c) << x;` parse as a void expression in the failing branch.
struct Voidify {
  void operator&(CheckFailure&) {}
  void operator&(CheckFailure&&) {}  // STRATA_CHECK(c) with no message
};

}  // namespace strata::detail

#define STRATA_CHECK(cond) \
  (cond) ? (void)0 : ::strata::detail::Voidify() & ::strata::detail::CheckFailure(__FILE__, __LINE__, #cond)
