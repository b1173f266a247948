#include "common/units.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace tq {
namespace {

struct Suffix {
  std::string_view text;
  bool case_insensitive;
  unsigned __int128 numerator;  // multiply the number by numerator / denominator
  unsigned __int128 denominator;
};

constexpr unsigned __int128 kK = 1000, kM = kK * 1000, kG = kM * 1000, kT = kG * 1000;

// Bit-rate forms are case-insensitive ("Gbps" == "gbps"); byte-rate forms keep their case so that
// "MB/s" (bytes) can never be confused with a bit rate.
constexpr std::array<Suffix, 16> kRateSuffixes{{
    {"bps", true, 1, 8},
    {"kbps", true, kK, 8},
    {"mbps", true, kM, 8},
    {"gbps", true, kG, 8},
    {"tbps", true, kT, 8},
    {"bit", true, 1, 8},
    {"kbit", true, kK, 8},
    {"mbit", true, kM, 8},
    {"gbit", true, kG, 8},
    {"tbit", true, kT, 8},
    {"B/s", false, 1, 1},
    {"kB/s", false, kK, 1},
    {"KB/s", false, kK, 1},
    {"MB/s", false, kM, 1},
    {"GB/s", false, kG, 1},
    {"TB/s", false, kT, 1},
}};

constexpr unsigned __int128 kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024, kTi = kGi * 1024;
constexpr std::array<Suffix, 10> kSizeSuffixes{{
    {"B", false, 1, 1},
    {"KiB", false, kKi, 1},
    {"MiB", false, kMi, 1},
    {"GiB", false, kGi, 1},
    {"TiB", false, kTi, 1},
    {"kB", false, kK, 1},
    {"KB", false, kK, 1},
    {"MB", false, kM, 1},
    {"GB", false, kG, 1},
    {"TB", false, kT, 1},
}};

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A decimal number "123.45" as mantissa / 10^scale, exactly. At most 30 significant digits.
struct Decimal {
  unsigned __int128 mantissa = 0;
  unsigned __int128 scale = 1;
};

template <size_t N>
Result<uint64_t> parseWithSuffixes(std::string_view original, const std::array<Suffix, N>& table,
                                   const Suffix& plain, std::string_view what) {
  std::string_view text = trim(original);
  auto fail = [&](std::string_view why) {
    return invalidArgument("invalid " + std::string(what) + " \"" + std::string(original) +
                           "\": " + std::string(why));
  };
  if (text.empty()) return fail("empty");
  if (text.front() == '-') return fail("must not be negative");
  if (text.front() == '+') text.remove_prefix(1);

  Decimal d;
  size_t i = 0;
  int digits = 0;
  bool seen_dot = false, any_digit = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.' && !seen_dot) {
      seen_dot = true;
      continue;
    }
    if (c == '_' || c == ',') return fail("digit separators are not allowed");
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    any_digit = true;
    if (d.mantissa == 0 && c == '0' && !seen_dot) continue;  // leading zeros
    if (++digits > 30) return fail("too many digits");
    d.mantissa = d.mantissa * 10 + static_cast<unsigned>(c - '0');
    if (seen_dot) d.scale *= 10;
  }
  if (!any_digit) return fail("expected a number");
  std::string_view suffix = trim(text.substr(i));

  const Suffix* unit = nullptr;
  if (suffix.empty()) {
    unit = &plain;
  } else {
    for (const Suffix& s : table) {
      if (s.case_insensitive ? equalsIgnoreCase(s.text, suffix) : s.text == suffix) {
        unit = &s;
        break;
      }
    }
  }
  if (unit == nullptr) {
    std::string known;
    for (const Suffix& s : table) {
      if (!known.empty()) known += ", ";
      known += s.text;
    }
    return fail("unknown unit \"" + std::string(suffix) + "\" (known: " + known + ")");
  }
  // value = mantissa * numerator / (scale * denominator), rounded to nearest.
  // mantissa < 10^30 and numerator <= 2^40, so the product fits in 128 bits.
  unsigned __int128 num = d.mantissa * unit->numerator;
  unsigned __int128 den = d.scale * unit->denominator;
  unsigned __int128 value = (num + den / 2) / den;
  if (value > std::numeric_limits<uint64_t>::max()) return fail("too large");
  return static_cast<uint64_t>(value);
}

std::string formatScaled(uint64_t value, const char* const* units, const uint64_t* factors,
                         size_t n) {
  for (size_t k = n; k-- > 0;) {
    if (value >= factors[k] || k == 0) {
      char buf[64];
      double v = static_cast<double>(value) / static_cast<double>(factors[k]);
      std::snprintf(buf, sizeof buf, "%.3f", v);
      std::string s(buf);
      while (!s.empty() && s.back() == '0') s.pop_back();
      if (!s.empty() && s.back() == '.') s.pop_back();
      return s + units[k];
    }
  }
  return std::to_string(value);
}

}  // namespace

Result<uint64_t> parseRate(std::string_view text) {
  static constexpr Suffix kPlainBits{"", true, 1, 8};
  return parseWithSuffixes(text, kRateSuffixes, kPlainBits, "rate");
}

Result<uint64_t> parseSize(std::string_view text) {
  static constexpr Suffix kPlainBytes{"", true, 1, 1};
  return parseWithSuffixes(text, kSizeSuffixes, kPlainBytes, "size");
}

Result<double> parsePercent(std::string_view original) {
  std::string_view text = trim(original);
  if (!text.empty() && text.back() == '%') text.remove_suffix(1);
  text = trim(text);
  auto fail = [&](std::string_view why) {
    return invalidArgument("invalid percentage \"" + std::string(original) +
                           "\": " + std::string(why));
  };
  if (text.empty()) return fail("empty");
  if (text.front() == '-') return fail("must not be negative");
  double v = 0;
  char extra = 0;
  std::string s(text);
  if (std::sscanf(s.c_str(), "%lf%c", &v, &extra) != 1) return fail("expected a number");
  if (!(v >= 0 && v <= 100)) return fail("must be between 0 and 100");
  return v;
}

std::string formatRate(uint64_t bytes_per_second) {
  // Work in bits; a rate above 2^61 bytes/s would overflow, fall back to bytes then.
  if (bytes_per_second > (std::numeric_limits<uint64_t>::max() >> 3)) {
    static const char* const kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
    static const uint64_t kFactors[] = {1, 1000, 1000000, 1000000000, 1000000000000};
    return formatScaled(bytes_per_second, kUnits, kFactors, 5);
  }
  static const char* const kUnits[] = {"bps", "Kbps", "Mbps", "Gbps", "Tbps"};
  static const uint64_t kFactors[] = {1, 1000, 1000000, 1000000000, 1000000000000};
  return formatScaled(bytes_per_second * 8, kUnits, kFactors, 5);
}

std::string formatSize(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  static const uint64_t kFactors[] = {1, 1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40};
  return formatScaled(bytes, kUnits, kFactors, 5);
}

}  // namespace tq
