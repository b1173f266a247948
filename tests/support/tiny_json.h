// A tiny JSON reader for tests (tc -j, iperf3 -J): enough of RFC 8259 for tool output.
// Numbers keep their text so 64-bit counters stay exact. Not for production input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tq::testing {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  static Result<Json> parse(std::string_view text);

  Type type() const { return type_; }
  bool isObject() const { return type_ == Type::kObject; }
  bool isArray() const { return type_ == Type::kArray; }
  // Member lookup; nullptr if absent or not an object.
  const Json* get(std::string_view key) const;
  // Path lookup "end.sum_received.bits_per_second"; nullptr if any step is missing.
  const Json* path(std::string_view dotted) const;
  const std::vector<Json>& items() const { return items_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }
  const std::string& str() const { return text_; }  // string value, or a number's text
  double number() const;
  int64_t integer() const;
  bool boolean() const { return bool_; }

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string text_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace tq::testing
