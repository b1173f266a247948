#include "tests/support/tiny_json.h"

#include <cctype>
#include <cstdlib>

namespace tq::testing {

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  Result<Json> document() {
    TQ_ASSIGN_OR_RETURN(Json v, value(0));
    skipSpace();
    if (pos_ != s_.size()) return error("trailing characters");
    return v;
  }

 private:
  Status error(std::string_view what) const {
    return invalidArgument("json at offset " + std::to_string(pos_) + ": " + std::string(what));
  }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Result<std::string> string() {
    if (!eat('"')) return error("expected string");
    std::string out;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return error("short \\u escape");
          unsigned cp = static_cast<unsigned>(
              std::strtoul(std::string(s_.substr(pos_, 4)).c_str(), nullptr, 16));
          pos_ += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
          }
          break;
        }
        default: out += e; break;
      }
    }
    return error("unterminated string");
  }

  Result<Json> value(int depth) {
    if (depth > 64) return error("nested too deep");
    skipSpace();
    if (pos_ >= s_.size()) return error("unexpected end");
    Json v;
    char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.type_ = Json::Type::kObject;
      if (eat('}')) return v;
      do {
        TQ_ASSIGN_OR_RETURN(std::string key, string());
        if (!eat(':')) return error("expected ':'");
        TQ_ASSIGN_OR_RETURN(Json member, value(depth + 1));
        v.members_.emplace_back(std::move(key), std::move(member));
      } while (eat(','));
      if (!eat('}')) return error("expected '}'");
      return v;
    }
    if (c == '[') {
      ++pos_;
      v.type_ = Json::Type::kArray;
      if (eat(']')) return v;
      do {
        TQ_ASSIGN_OR_RETURN(Json item, value(depth + 1));
        v.items_.push_back(std::move(item));
      } while (eat(','));
      if (!eat(']')) return error("expected ']'");
      return v;
    }
    if (c == '"') {
      TQ_ASSIGN_OR_RETURN(v.text_, string());
      v.type_ = Json::Type::kString;
      return v;
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        v.type_ = word == "null" ? Json::Type::kNull : Json::Type::kBool;
        v.bool_ = word == "true";
        return v;
      }
    }
    size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' ||
            s_[pos_] == '+' || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      ++pos_;
    if (pos_ == start) return error(std::string("unexpected character '") + c + "'");
    v.type_ = Json::Type::kNumber;
    v.text_ = std::string(s_.substr(start, pos_ - start));
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

Result<Json> Json::parse(std::string_view text) { return JsonParser(text).document(); }

const Json* Json::get(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const Json* Json::path(std::string_view dotted) const {
  const Json* cur = this;
  while (cur && !dotted.empty()) {
    size_t dot = dotted.find('.');
    cur = cur->get(dotted.substr(0, dot));
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  return cur;
}

double Json::number() const { return std::strtod(text_.c_str(), nullptr); }
int64_t Json::integer() const { return std::strtoll(text_.c_str(), nullptr, 10); }

}  // namespace tq::testing
