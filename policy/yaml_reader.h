// Reading policy YAML along a schema, shared by the units of policy/ that parse parts of a
// policy file (policy_file.cc: links and tenants; topology_file.cc: shared links): positions,
// the index of fields that failed to parse, the error list, and FieldReader's typed readers
// (each reports a positioned error and marks the field invalid, so that the semantic rules skip
// it and one mistake gives one error).
//
// Internal to tq_policy_file: the document's nodes are yaml_doc.h's (libyaml), so only
// policy/*.cc include it.
// Thread-safety: values and pure functions.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/tenant_shm.h"
#include "common/units.h"
#include "policy/policy_file.h"
#include "policy/yaml_doc.h"

namespace tq::policy::yaml {

struct Pos {
  int line = 0;  // 1-based, 0 = unknown
  int column = 0;
};

inline Pos posOf(const Mark& m) {
  if (m.is_null() || m.line < 0 || m.column < 0) return {};
  return {m.line + 1, m.column + 1};
}

// Where each field of the document sits, and which fields failed to parse (semantic rules skip
// those, so one mistake is reported once). Empty for structured (non-YAML) input.
struct FieldIndex {
  std::unordered_map<std::string, Pos> pos;
  std::set<std::string> invalid;

  bool usable(const std::string& path) const { return invalid.count(path) == 0; }

  // The position of `path`, else of its nearest recorded parent ("tenants[1].x" -> "tenants[1]").
  Pos find(std::string path) const {
    for (;;) {
      auto it = pos.find(path);
      if (it != pos.end()) return it->second;
      size_t cut = path.find_last_of(".[");
      if (cut == std::string::npos || cut == 0) return {};
      path.resize(cut);
    }
  }
};

class ErrorList {
 public:
  explicit ErrorList(std::string_view file) : file_(file) {}
  void add(Pos p, std::string field, std::string reason) {
    errors_.push_back({file_, p.line, p.column, std::move(field), std::move(reason)});
  }
  std::vector<PolicyError> take() {
    std::stable_sort(errors_.begin(), errors_.end(),
                     [](const PolicyError& a, const PolicyError& b) {
                       return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                     });
    return std::move(errors_);
  }
  bool empty() const { return errors_.empty(); }

 private:
  std::string file_;
  std::vector<PolicyError> errors_;
};

// A string for an error message: quoted, control characters replaced, cut after ~60 characters.
std::string quote(std::string_view s);
std::string rangeReason(uint64_t min, uint64_t max, std::string_view got);
// `unknown field "x" (did you mean "y"?)`, else the list of the known fields.
std::string unknownFieldReason(std::string_view key, std::span<const std::string_view> known);
// What a node is, for "expected X, got Y".
std::string describe(const Node& n);
// "5%", "0.5%": the shortest text that parses back to the same percentage.
std::string percentText(double p);
// "tenants[3].limit" (without `field`: "tenants[3]").
std::string itemPath(std::string_view list, size_t i, std::string_view field = {});
// "tenants[3], line 12" (the line when known): where another object of the file is.
std::string itemWhere(const FieldIndex& index, std::string_view list, size_t i);

// The typed readers. They never descend into unknown fields, so the work is bounded by the
// schema and the size limits, whatever aliases the document uses.
class FieldReader {
 public:
  FieldReader(ErrorList& errors, FieldIndex& index) : errors_(errors), index_(index) {}

  struct Entry {
    Node key;
    Node value;
    Pos pos;  // of the value, or of the key when the value is empty
  };
  using Fields = std::map<std::string, Entry, std::less<>>;

  // A sequence of strings (platform names); their syntax is checked by validateSpec. An item
  // that is not a string is kept as "" (indexes stay aligned) and marked invalid.
  void readNames(const Entry& e, const std::string& path, size_t max_items,
                 std::vector<std::string>* out) {
    forEachItem(e, path, max_items, [&](const Node& item, const std::string& p) {
      std::string v;
      readString(Entry{Node(), item, posOf(item.mark())}, p, &v);
      out->push_back(std::move(v));
    });
  }

  // A field the caller could not read at all (its parent is not a mapping): the rules skip it.
  void markInvalid(const std::string& path) { index_.invalid.insert(path); }

  void bad(const std::string& path, Pos p, std::string reason) {
    index_.invalid.insert(path);
    errors_.add(p, path, std::move(reason));
  }

  bool readMapping(const Node& node, Pos at, const std::string& path,
                   std::span<const std::string_view> known, Fields* out) {
    if (!node.isMap()) {
      bad(path.empty() ? "(document)" : path, at, "expected a mapping, got " + describe(node));
      return false;
    }
    if (!path.empty()) index_.pos[path] = at;
    for (const auto& [key, value] : node.pairs()) {
      Pos kp = posOf(key.mark());
      if (!key.isScalar()) {
        errors_.add(kp, path.empty() ? "(document)" : path,
                    "keys must be plain names, got " + describe(key));
        continue;
      }
      const std::string& name = key.scalar();
      const std::string fpath = path.empty() ? name : path + "." + name;
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        errors_.add(kp, fpath, unknownFieldReason(name, known));
        continue;
      }
      auto [pos, inserted] = out->try_emplace(name);
      if (!inserted) {
        bad(fpath, kp,
            "duplicate key " + quote(name) + " (first at line " +
                std::to_string(pos->second.key.mark().line + 1) + ", column " +
                std::to_string(pos->second.key.mark().column + 1) + ")");
        continue;
      }
      Pos vp = value.isNull() ? kp : posOf(value.mark());
      if (vp.line == 0) vp = kp;
      pos->second = Entry{key, value, vp};
      index_.pos[fpath] = vp;
    }
    return true;
  }

  bool requireField(Fields& f, const std::string& path, std::string_view key, Pos at) {
    if (f.count(key)) return true;
    const std::string fpath = path.empty() ? std::string(key) : path + "." + std::string(key);
    bad(fpath, at, "required field missing");
    return false;
  }

  template <typename Fn>
  void forEachItem(const Entry& e, const std::string& path, size_t max_items, Fn fn) {
    if (!e.value.isSequence()) {
      bad(path, e.pos,
          "expected a sequence" + std::string(e.value.isNull() ? " (write [] for none)" : "") +
              ", got " + describe(e.value));
      return;
    }
    if (e.value.size() > max_items) {
      bad(path, e.pos,
          "too many items: " + std::to_string(e.value.size()) + " (at most " +
              std::to_string(max_items) + ")");
      return;
    }
    size_t i = 0;
    for (const Node& item : e.value.items()) {
      const std::string p = path + "[" + std::to_string(i++) + "]";
      Pos ip = posOf(item.mark());
      if (ip.line == 0) ip = e.pos;
      index_.pos[p] = ip;
      fn(item, p);
    }
  }

  bool scalar(const Entry& e, const std::string& path, std::string_view expected) {
    if (e.value.isScalar()) return true;
    bad(path, e.pos, "expected " + std::string(expected) + ", got " + describe(e.value));
    return false;
  }

  bool readString(const Entry& e, const std::string& path, std::string* out) {
    if (!scalar(e, path, "a string")) return false;
    *out = e.value.scalar();
    return true;
  }

  bool readName(const Entry& e, const std::string& path, std::string* out) {
    if (!readString(e, path, out)) return false;
    if (!isDns1123Label(*out)) {
      bad(path, e.pos,
          quote(*out) +
              " is not a DNS-1123 label (1-63 characters of a-z, 0-9 and '-', "
              "starting and ending with a letter or digit)");
      return false;
    }
    return true;
  }

  bool readRate(const Entry& e, const std::string& path, uint64_t* out) {
    return readParsed(e, path, "a rate such as \"40Gbps\"", parseRate, out);
  }

  bool readPercent(const Entry& e, const std::string& path, double* out) {
    return readParsed(e, path, "a percentage such as \"5%\"", parsePercent, out);
  }

  // A scalar that `parse` (common/units.h: Result<T>(std::string_view)) turns into *out; its
  // error, at the entry, otherwise. `expected` names the form for a value that is not a scalar.
  template <typename T, typename Parse>
  bool readParsed(const Entry& e, const std::string& path, std::string_view expected, Parse parse,
                  T* out) {
    if (!scalar(e, path, expected)) return false;
    auto r = parse(e.value.scalar());
    if (!r.ok()) {
      bad(path, e.pos, r.status().message());
      return false;
    }
    *out = *r;
    return true;
  }

  // A plain (unquoted) decimal integer in [min, max].
  bool readUint(const Entry& e, const std::string& path, uint64_t min, uint64_t max,
                uint32_t* out) {
    if (!scalar(e, path, "an integer")) return false;
    const std::string& s = e.value.scalar();
    if (e.value.quoted()) {
      bad(path, e.pos,
          "expected an integer, got the quoted string " + quote(s) + " (remove the quotes)");
      return false;
    }
    std::string_view digits = s;
    bool negative = false;
    if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
      negative = digits.front() == '-';
      digits.remove_prefix(1);
    }
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (!all_digits) {
      bad(path, e.pos, "expected an integer, got " + quote(s));
      return false;
    }
    if (negative || ec != std::errc() || end != digits.data() + digits.size() || v < min ||
        v > max) {
      bad(path, e.pos, rangeReason(min, max, s));
      return false;
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }

  bool readBool(const Entry& e, const std::string& path, bool* out) {
    if (!scalar(e, path, "true or false")) return false;
    const std::string& s = e.value.scalar();
    if (!e.value.quoted()) {
      if (s == "true" || s == "True" || s == "TRUE") return *out = true, true;
      if (s == "false" || s == "False" || s == "FALSE") return *out = false, true;
    }
    bad(path, e.pos, "expected true or false, got " + quote(s));
    return false;
  }

 protected:
  ErrorList& errors_;
  FieldIndex& index_;
};

}  // namespace tq::policy::yaml
