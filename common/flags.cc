#include "common/flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "common/endpoints.h"
#include "common/units.h"

namespace tq {
namespace {

std::string quoted(std::string_view v) { return "\"" + std::string(v) + "\""; }

// Shortest decimal text of a whole or fractional number of seconds.
std::string secondsText(int64_t ns) {
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000);
  std::string s = std::to_string(static_cast<double>(ns) / 1e9);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// A size as parseSize reads it back exactly: "256KiB", "1500B".
std::string sizeText(uint64_t bytes) {
  return bytes % 1024 == 0 ? formatSize(bytes) : std::to_string(bytes) + "B";
}

// Appends `words` to `out` wrapped to `width` columns, continuation lines indented by `indent`.
void appendWrapped(std::string* out, std::string_view words, size_t column, size_t indent,
                   size_t width) {
  size_t pos = 0;
  bool first_on_line = true;
  while (pos < words.size()) {
    while (pos < words.size() && words[pos] == ' ') ++pos;
    if (pos >= words.size()) break;
    size_t end = words.find(' ', pos);
    if (end == std::string_view::npos) end = words.size();
    const std::string_view word = words.substr(pos, end - pos);
    if (!first_on_line && column + 1 + word.size() > width) {
      *out += '\n';
      out->append(indent, ' ');
      column = indent;
      first_on_line = true;
    }
    if (!first_on_line) {
      *out += ' ';
      ++column;
    }
    *out += word;
    column += word.size();
    first_on_line = false;
    pos = end;
  }
}

std::string markdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

bool FlagTable::Parsed::has(std::string_view name) const {
  return std::find(given.begin(), given.end(), name) != given.end();
}

FlagTable::Flag& FlagTable::add(std::string name, std::string placeholder, std::string help,
                                Setter set) {
  Flag f;
  f.name = std::move(name);
  f.placeholder = std::move(placeholder);
  f.help = std::move(help);
  f.set = std::move(set);
  return flags_.emplace_back(std::move(f));
}

FlagTable::Flag& FlagTable::toggle(std::string name, bool* out, std::string help, bool value) {
  return add(std::move(name), "", std::move(help), [out, value](std::string_view) {
    *out = value;
    return okStatus();
  });
}

FlagTable::Flag& FlagTable::text(std::string name, std::string placeholder, std::string* out,
                                 std::string help) {
  Flag& f =
      add(std::move(name), std::move(placeholder), std::move(help), [out](std::string_view v) {
        *out = std::string(v);
        return okStatus();
      });
  f.default_text = *out;
  return f;
}

FlagTable::Flag& FlagTable::nonEmpty(std::string name, std::string placeholder, std::string* out,
                                     std::string help) {
  Flag& f = add(std::move(name), std::move(placeholder), std::move(help),
                [out](std::string_view v) -> Status {
                  if (v.empty()) return invalidArgument("empty value");
                  *out = std::string(v);
                  return okStatus();
                });
  f.default_text = *out;
  return f;
}

FlagTable::Flag& FlagTable::hostPort(std::string name, std::string* out, std::string help) {
  Flag& f = add(std::move(name), "HOST:PORT", std::move(help), [out](std::string_view v) -> Status {
    TQ_RETURN_IF_ERROR(parseHostPort(v).status());
    *out = std::string(v);
    return okStatus();
  });
  f.default_text = *out;
  return f;
}

FlagTable::Flag& FlagTable::hostPortList(std::string name, std::vector<std::string>* out,
                                         std::string help, std::string* as_given) {
  Flag& f = add(std::move(name), "HOST:PORT[,HOST:PORT...]", std::move(help),
                [out, as_given](std::string_view v) -> Status {
                  TQ_ASSIGN_OR_RETURN(std::vector<std::string> list, splitEndpointList(v, ""));
                  for (const std::string& e : list) TQ_RETURN_IF_ERROR(parseHostPort(e).status());
                  *out = std::move(list);
                  if (as_given != nullptr) *as_given = std::string(v);
                  return okStatus();
                });
  for (const std::string& e : *out) f.default_text += (f.default_text.empty() ? "" : ",") + e;
  return f;
}

Result<int64_t> FlagTable::parseInteger(std::string_view v, int64_t min, int64_t max) {
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
    return invalidArgument(quoted(v) + " is not a whole number");
  }
  if (x < min || x > max) {
    return invalidArgument(std::string(v) + " is outside [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  return x;
}

FlagTable::Flag& FlagTable::integer(std::string name, std::string placeholder, int64_t* out,
                                    int64_t min, int64_t max, std::string help) {
  return integer<int64_t>(std::move(name), std::move(placeholder), out, min, max, std::move(help));
}

FlagTable::Flag& FlagTable::millis(std::string name, int64_t* out_ns, int64_t min_ms,
                                   int64_t max_ms, std::string help) {
  return wholeUnits(std::move(name), "MS", 1'000'000, out_ns, min_ms, max_ms, std::move(help));
}

FlagTable::Flag& FlagTable::micros(std::string name, int64_t* out_ns, int64_t min_us,
                                   int64_t max_us, std::string help) {
  return wholeUnits(std::move(name), "US", 1'000, out_ns, min_us, max_us, std::move(help));
}

FlagTable::Flag& FlagTable::wholeUnits(std::string name, std::string placeholder, int64_t unit_ns,
                                       int64_t* out_ns, int64_t min, int64_t max,
                                       std::string help) {
  Flag& f = add(std::move(name), std::move(placeholder), std::move(help),
                [out_ns, unit_ns, min, max](std::string_view v) -> Status {
                  TQ_ASSIGN_OR_RETURN(int64_t n, parseInteger(v, min, max));
                  *out_ns = n * unit_ns;
                  return okStatus();
                });
  f.default_text = std::to_string(*out_ns / unit_ns);
  f.range = std::to_string(min) + ".." + std::to_string(max);
  return f;
}

FlagTable::Flag& FlagTable::seconds(std::string name, int64_t* out_ns, double min_s, double max_s,
                                    std::string help) {
  Flag& f = add(std::move(name), "SECONDS", std::move(help),
                [out_ns, min_s, max_s](std::string_view v) -> Status {
                  const std::string s(v);
                  char* end = nullptr;
                  const double x = std::strtod(s.c_str(), &end);
                  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x)) {
                    return invalidArgument(quoted(v) + " is not a number of seconds");
                  }
                  if (!(x >= min_s && x <= max_s)) {
                    return invalidArgument(s + " s is outside [" +
                                           secondsText(std::llround(min_s * 1e9)) + ", " +
                                           secondsText(std::llround(max_s * 1e9)) + "]");
                  }
                  *out_ns = std::llround(x * 1e9);
                  return okStatus();
                });
  f.default_text = secondsText(*out_ns);
  f.range = secondsText(std::llround(min_s * 1e9)) + ".." + secondsText(std::llround(max_s * 1e9));
  return f;
}

FlagTable::Flag& FlagTable::size(std::string name, uint64_t* out, uint64_t min, uint64_t max,
                                 std::string help) {
  Flag& f = add(std::move(name), "SIZE", std::move(help), [out, min, max](std::string_view v) {
    TQ_ASSIGN_OR_RETURN(uint64_t b, parseSize(v));
    if (b < min || b > max) {
      return invalidArgument(std::string(v) + " is outside [" + sizeText(min) + ", " +
                             sizeText(max) + "]");
    }
    *out = b;
    return okStatus();
  });
  f.default_text = sizeText(*out);
  f.range = sizeText(min) + ".." + sizeText(max);
  return f;
}

FlagTable::Flag& FlagTable::logLevel(std::string name, LogLevel* out, std::string help) {
  Flag& f = add(std::move(name), "LEVEL", std::move(help), [out](std::string_view v) {
    TQ_ASSIGN_OR_RETURN(*out, parseLogLevel(v));
    return okStatus();
  });
  for (char c : logLevelName(*out)) {
    f.default_text += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return f;
}

FlagTable::Flag& FlagTable::choice(std::string name, std::string* out,
                                   std::vector<std::string> words, std::string help) {
  std::string placeholder;
  for (const std::string& w : words) placeholder += (placeholder.empty() ? "" : "|") + w;
  Flag& f = add(std::move(name), placeholder, std::move(help),
                [out, words = std::move(words)](std::string_view v) -> Status {
                  if (std::find(words.begin(), words.end(), v) != words.end()) {
                    *out = std::string(v);
                    return okStatus();
                  }
                  return invalidArgument(oneOfError(
                      v, words.size(), [&](size_t i) { return std::string_view(words[i]); }));
                });
  f.default_text = *out;
  return f;
}

std::string FlagTable::oneOfError(std::string_view v, size_t n,
                                  const std::function<std::string_view(size_t)>& word) {
  std::string m = quoted(v) + " is not ";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) m += i + 1 == n ? " or " : ", ";
    m += word(i);
  }
  return m;
}

const FlagTable::Flag* FlagTable::find(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name || (!f.short_name.empty() && f.short_name == name)) return &f;
  }
  return nullptr;
}

Result<FlagTable::Parsed> FlagTable::parse(int argc, const char* const* argv) const {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

Result<FlagTable::Parsed> FlagTable::parse(const std::vector<std::string>& args) const {
  Parsed parsed;
  std::set<const Flag*> seen;
  bool flags_over = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_over || arg.empty() || arg[0] != '-' || arg == "-") {
      parsed.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_over = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    std::string name = arg;
    std::string value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const Flag* f = find(name);
    if (f == nullptr) return invalidArgument("unknown flag " + quoted(arg));
    if (!seen.insert(f).second && !f->repeatable) {
      return invalidArgument(f->name + " given twice");
    }
    if (f->placeholder.empty()) {
      if (inline_value) return invalidArgument(f->name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= args.size())
        return invalidArgument(f->name + " needs a value " + f->placeholder);
      value = args[++i];
    }
    Status s = f->set(value);
    if (!s.ok()) return s.withContext(f->name);
    parsed.given.push_back(f->name);
  }
  if (!parsed.help && parsed.positional.size() > max_positionals_) {
    return invalidArgument("unexpected argument " + quoted(parsed.positional[max_positionals_]));
  }
  for (const Flag& f : flags_) {
    if (f.required && seen.count(&f) == 0) {
      return invalidArgument(f.name + " " + f.placeholder + " is required");
    }
  }
  return parsed;
}

std::string FlagTable::usage(size_t width) const {
  constexpr size_t kHelpColumn = 28;
  std::string out;
  for (const Flag& f : flags_) {
    if (f.hidden) continue;
    std::string head = "  ";
    if (!f.short_name.empty()) head += f.short_name + ", ";
    head += f.name;
    if (!f.placeholder.empty()) head += " " + f.placeholder;
    out += head;
    size_t column = head.size();
    if (column + 2 > kHelpColumn) {
      out += '\n';
      column = 0;
    }
    out.append(kHelpColumn - column, ' ');
    std::vector<std::string> notes;
    if (!f.range.empty()) notes.push_back(f.range);
    if (f.required) notes.emplace_back("required");
    if (!f.required_when.empty()) notes.push_back("required " + f.required_when);
    if (!f.default_text.empty()) notes.push_back("default " + f.default_text);
    std::string help = f.help;
    for (size_t i = 0; i < notes.size(); ++i) {
      help += (i == 0 ? " (" : "; ") + notes[i] + (i + 1 == notes.size() ? ")" : "");
    }
    appendWrapped(&out, help, kHelpColumn, kHelpColumn, width);
    out += '\n';
  }
  out += "  -h, --help";
  out.append(kHelpColumn - 12, ' ');
  out += "this help\n";
  return out;
}

std::string FlagTable::markdown() const {
  std::string out = "| Flag | Default | Meaning |\n|---|---|---|\n";
  for (const Flag& f : flags_) {
    if (f.hidden) continue;
    std::string flag = "`" + f.name + (f.placeholder.empty() ? "" : " " + f.placeholder) + "`";
    if (!f.short_name.empty()) flag = "`" + f.short_name + "`, " + flag;
    std::string def = f.default_text.empty() ? (f.placeholder.empty() ? "off" : "none")
                      : f.default_is_prose   ? f.default_text
                                             : "`" + f.default_text + "`";
    if (f.required) def = "required";
    if (!f.required_when.empty()) def = "required " + f.required_when;
    std::string help = f.help;
    if (!f.range.empty()) help += " (" + f.range + ")";
    out +=
        "| " + markdownCell(flag) + " | " + markdownCell(def) + " | " + markdownCell(help) + " |\n";
  }
  out += "| `-h`, `--help` | | this help |\n";
  return out;
}

std::string usageErrorText(std::string_view program, const Status& status) {
  return std::string(program) + ": " + status.message() + "\n(see " + std::string(program) +
         " --help)\n";
}

Result<std::string> generatedBlock(std::string_view doc, std::string_view tag) {
  const std::string begin = "<!-- BEGIN generated by " + std::string(tag) + " -->\n";
  const std::string end = "<!-- END generated -->";
  const size_t b = doc.find(begin);
  if (b == std::string_view::npos)
    return notFound("no line \"" + begin.substr(0, begin.size() - 1) + "\"");
  const size_t from = b + begin.size();
  const size_t e = doc.find(end, from);
  if (e == std::string_view::npos) return notFound("no \"" + end + "\" after \"" + begin + "\"");
  return std::string(doc.substr(from, e - from));
}

}  // namespace tq
