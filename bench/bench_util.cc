#include "bench/bench_util.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "src/base/durable_file.h"

namespace strata::bench {

Summary Summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

std::string Format(const Summary& s, int digits) {
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f})", s.median, digits, s.min, digits, s.max, digits);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Table::Print(std::FILE* out) const {
  std::vector<size_t> width;
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (size_t k = 0; k < rows_.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows_[k].size(); ++i) {
      const std::string& c = rows_[k][i];
      if (i == 0) line += c + std::string(width[i] - c.size(), ' ');
      else line += "  " + std::string(width[i] - c.size(), ' ') + c;
    }
    std::fprintf(out, "%s\n", line.c_str());
    if (k == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      std::fprintf(out, "%s\n", std::string(total - 2, '-').c_str());
    }
  }
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

StatusOr<uint64_t> ParseBytes(const std::string& text, const std::string& flag) {
  // Digits with at most one '.', then an optional unit: 4096, 1M, 21.5G.
  size_t pos = 0, dots = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.'))
    dots += text[pos++] == '.';
  if (pos == 0 || dots > 1 || text[0] == '.' || text[pos - 1] == '.')
    return InvalidArgument("{}: '{}' is not a byte count (e.g. 4096, 1M, 21.5G)", flag, text);
  const long double value = std::strtold(text.substr(0, pos).c_str(), nullptr);
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1ull << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1ull << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1ull << 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1ull << 40;
  else return InvalidArgument("{}: unknown unit '{}' in '{}' (use K, M, G or T)", flag, unit, text);
  const long double bytes = value * static_cast<long double>(mult);
  if (bytes >= 0x1p63L) return InvalidArgument("{}: '{}' is more bytes than any disk holds", flag, text);
  if (bytes != std::floor(bytes))
    return InvalidArgument("{}: '{}' is not a whole number of bytes", flag, text);
  return static_cast<uint64_t>(bytes);
}

Status WriteFile(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, text);  // under a temporary name until complete
}

}  // namespace strata::bench
