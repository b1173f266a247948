#include "policy/yaml_reader.h"

#include <charconv>
#include <limits>

namespace tq::policy::yaml {
namespace {

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      char x = static_cast<char>(std::tolower(static_cast<unsigned char>(a[i - 1])));
      char y = static_cast<char>(std::tolower(static_cast<unsigned char>(b[j - 1])));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x == y ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
      continue;
    }
    out += c;
  }
  if (out.size() > 66) out = out.substr(0, 60) + "...";
  return out + "\"";
}

std::string rangeReason(uint64_t min, uint64_t max, std::string_view got) {
  return "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
         std::string(got);
}

std::string unknownFieldReason(std::string_view key, std::span<const std::string_view> known) {
  std::string_view best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (std::string_view k : known) {
    size_t d = editDistance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  if (key == "<<") return "YAML merge keys (<<) are not supported: write the fields out";
  std::string r = "unknown field " + quote(key);
  if (!best.empty() && best_d <= std::max<size_t>(2, best.size() / 3)) {
    return r + " (did you mean \"" + std::string(best) + "\"?)";
  }
  r += " (known fields: ";
  for (size_t i = 0; i < known.size(); ++i) r += (i ? ", " : "") + std::string(known[i]);
  return r + ")";
}

std::string describe(const Node& n) {
  switch (n.type()) {
    case NodeType::kMap: return "a mapping";
    case NodeType::kSequence: return "a sequence";
    case NodeType::kNull: return "an empty value";
    case NodeType::kScalar: return quote(n.scalar());
    case NodeType::kUndefined: break;
  }
  return "nothing";
}

std::string percentText(double p) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, p);
  return std::string(buf, ec == std::errc() ? end : buf) + "%";
}

std::string itemPath(std::string_view list, size_t i, std::string_view field) {
  std::string s = std::string(list) + "[" + std::to_string(i) + "]";
  if (!field.empty()) s += "." + std::string(field);
  return s;
}

std::string itemWhere(const FieldIndex& index, std::string_view list, size_t i) {
  std::string s = itemPath(list, i);
  Pos ps = index.find(s);
  if (ps.line > 0) s += ", line " + std::to_string(ps.line);
  return s;
}

}  // namespace tq::policy::yaml
