// Logging to stderr with levels; STRATA_LOG=debug|info|warn|error|off picks the threshold
// (default info). Thread-safe: each line is written with one fwrite.
//
//   LogWarn("io_uring refused ({}); using the pread engine", reason);
//   LogOnce(LogLevel::kWarn, "scalar Adam: no AVX2 on this CPU");  // once per process per text
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

inline LogLevel LogThreshold() {
  static const LogLevel level = [] {
    const char* env = std::getenv("STRATA_LOG");
    if (!env) return LogLevel::kInfo;
    if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
    if (!std::strcmp(env, "warn")) return LogLevel::kWarn;
    if (!std::strcmp(env, "error")) return LogLevel::kError;
    if (!std::strcmp(env, "off")) return LogLevel::kOff;
    return LogLevel::kInfo;
  }();
  return level;
}

inline void LogLine(LogLevel level, const std::string& text) {
  if (level < LogThreshold()) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::string line = fmt::format("[strata {}] {}\n", kNames[static_cast<int>(level)], text);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// Logs `text` the first time it is seen in this process; later identical texts are dropped.
inline void LogOnce(LogLevel level, const std::string& text) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(text).second) return;
  }
  LogLine(level, text);
}

template <typename... A>
void LogDebug(fmt::format_string<A...> f, A&&... a) { if (LogThreshold() <= LogLevel::kDebug) LogLine(LogLevel::kDebug, fmt::format(f, std::forward<A>(a)...)); }
template <typename... A>
void LogInfo(fmt::format_string<A...> f, A&&... a) { LogLine(LogLevel::kInfo, fmt::format(f, std::forward<A>(a)...)); }
template <typename... A>
void LogWarn(fmt::format_string<A...> f, A&&... a) { LogLine(LogLevel::kWarn, fmt::format(f, std::forward<A>(a)...)); }
template <typename... A>
void LogError(fmt::format_string<A...> f, A&&... a) { LogLine(LogLevel::kError, fmt::format(f, std::forward<A>(a)...)); }

}  // namespace strata
