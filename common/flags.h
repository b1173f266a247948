// One typed table of a program's command-line flags, which parses argv and writes the program's
// --help text and the flag table of its docs page (as nccl-plugin/params.h does for the plugin's
// environment variables).
//
// A program declares each flag once: its name, the placeholder of its value, what it means, the
// field it sets and how the value is checked (an integer range, a HOST:PORT, a size, one of
// some words...). The default shown in --help and the docs is the field's value when the flag is
// declared, so the struct's initialiser is the one place the default lives. Unit tests of each
// program parse through the same table the binary uses, and a test compares the generated docs
// table with the page (tests/unit/*/..._flags_test.cc).
//
// Syntax: "--name VALUE" or "--name=VALUE"; a switch takes no value ("--insecure=1" is an
// error); "-x VALUE" for a short alias; "-h"/"--help" stops parsing and sets Parsed::help. A flag
// given twice is an error unless it is repeatable. Arguments that do not start with '-' are
// returned as positional ones, in order ("--" ends the flags). Every error names the flag and
// the value.
//
// Not thread-safe (a table is built and used on one thread, at start-up). The setters keep
// pointers to the caller's fields: the table must not outlive them.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace tq {

class FlagTable {
 public:
  using Setter = std::function<Status(std::string_view value)>;

  struct Flag {
    std::string name;               // "--listen"
    std::string short_name;         // "-b", or ""
    std::string placeholder;        // "HOST:PORT"; "" for a switch (takes no value)
    std::string default_text;       // as --help and the docs show it; "" = no default
    bool default_is_prose = false;  // default_text describes ("the host name"), not a value
    std::string range;              // "1..10000", "1500B..4GiB": the accepted values, if bounded
    std::string help;               // plain text, one paragraph (wrapped by usage())
    Setter set;
    bool repeatable = false;
    bool required = false;
    bool hidden = false;        // parsed, not listed (a test-only knob)
    std::string required_when;  // documented condition ("unless --cleanup"); checked by the caller

    // Chainable adjustments after declaring.
    Flag& defaultValue(std::string value) {  // a literal value ("/run/tenantqos"; "" = none)
      default_text = std::move(value);
      default_is_prose = false;
      return *this;
    }
    Flag& defaultText(std::string prose) {  // a description ("the host name")
      default_text = std::move(prose);
      default_is_prose = true;
      return *this;
    }
    Flag& alias(std::string s) {
      short_name = std::move(s);
      return *this;
    }
    Flag& repeated() {
      repeatable = true;
      return *this;
    }
    Flag& mandatory() {
      required = true;
      return *this;
    }
    // Required under a condition the program checks after parsing; `when` is what --help and the
    // docs say ("unless --cleanup").
    Flag& requiredWhen(std::string when) {
      required_when = std::move(when);
      return *this;
    }
    Flag& hide() {
      hidden = true;
      return *this;
    }
  };

  struct Parsed {
    bool help = false;                    // -h/--help was given (nothing after it was read)
    std::vector<std::string> positional;  // non-flag arguments, in order
    std::vector<std::string> given;       // names of the flags given, in order
    bool has(std::string_view name) const;
  };

  explicit FlagTable(std::string program) : program_(std::move(program)) {}
  // Up to `max` arguments that are not flags are accepted (returned in Parsed::positional);
  // more are an "unexpected argument" error. None by default.
  FlagTable& positionals(size_t max) {
    max_positionals_ = max;
    return *this;
  }
  FlagTable(const FlagTable&) = delete;
  FlagTable& operator=(const FlagTable&) = delete;

  // Any flag: `set` receives the value (empty for a switch) and returns a message-bearing error.
  Flag& add(std::string name, std::string placeholder, std::string help, Setter set);

  // A switch: sets *out to `value` (true by default).
  Flag& toggle(std::string name, bool* out, std::string help, bool value = true);
  // Any text, empty included.
  Flag& text(std::string name, std::string placeholder, std::string* out, std::string help);
  // A non-empty text (a path, a name).
  Flag& nonEmpty(std::string name, std::string placeholder, std::string* out, std::string help);
  // HOST:PORT (common/endpoints.h parseHostPort), kept as given.
  Flag& hostPort(std::string name, std::string* out, std::string help);
  // HOST:PORT[,HOST:PORT...], each entry checked; *out gets the entries, *as_given the text.
  Flag& hostPortList(std::string name, std::vector<std::string>* out, std::string help,
                     std::string* as_given = nullptr);
  // A whole number in [min, max].
  Flag& integer(std::string name, std::string placeholder, int64_t* out, int64_t min, int64_t max,
                std::string help);
  template <typename T>
  Flag& integer(std::string name, std::string placeholder, T* out, int64_t min, int64_t max,
                std::string help) {
    Flag& f = add(std::move(name), std::move(placeholder), std::move(help),
                  [out, min, max](std::string_view v) -> Status {
                    TQ_ASSIGN_OR_RETURN(int64_t x, parseInteger(v, min, max));
                    *out = static_cast<T>(x);
                    return okStatus();
                  });
    if constexpr (requires { out->count(); }) {
      f.default_text = std::to_string(out->count());
    } else {
      f.default_text = std::to_string(static_cast<int64_t>(*out));
    }
    f.range = std::to_string(min) + ".." + std::to_string(max);
    return f;
  }
  // A whole number of milliseconds in [min_ms, max_ms], stored in nanoseconds.
  Flag& millis(std::string name, int64_t* out_ns, int64_t min_ms, int64_t max_ms, std::string help);
  // A whole number of microseconds in [min_us, max_us], stored in nanoseconds.
  Flag& micros(std::string name, int64_t* out_ns, int64_t min_us, int64_t max_us, std::string help);
  // Seconds (a decimal fraction allowed) in [min_s, max_s], stored in nanoseconds.
  Flag& seconds(std::string name, int64_t* out_ns, double min_s, double max_s, std::string help);
  // A size in bytes ("256KiB", "1MiB", "65536": common/units parseSize) in [min, max].
  Flag& size(std::string name, uint64_t* out, uint64_t min, uint64_t max, std::string help);
  // error|warn|info|debug|trace.
  Flag& logLevel(std::string name, LogLevel* out, std::string help);
  // One of `words`; *out gets the word.
  Flag& choice(std::string name, std::string* out, std::vector<std::string> words,
               std::string help);
  // One of `words`, mapped to values of an enum (or anything copyable).
  template <typename T>
  Flag& choice(std::string name, T* out, std::vector<std::pair<std::string, T>> words,
               std::string help) {
    std::string placeholder;
    std::string def;
    for (const auto& [w, v] : words) {
      placeholder += (placeholder.empty() ? "" : "|") + w;
      if (v == *out) def = w;
    }
    Flag& f = add(std::move(name), placeholder, std::move(help),
                  [out, words = std::move(words)](std::string_view v) -> Status {
                    for (const auto& [w, value] : words) {
                      if (v == w) {
                        *out = value;
                        return okStatus();
                      }
                    }
                    return invalidArgument(oneOfError(v, words.size(), [&](size_t i) {
                      return std::string_view(words[i].first);
                    }));
                  });
    f.default_text = def;
    return f;
  }

  // Parses argv[1..argc). Errors name the flag (or the unknown argument).
  Result<Parsed> parse(int argc, const char* const* argv) const;
  Result<Parsed> parse(const std::vector<std::string>& args) const;  // without argv[0]

  // The flag list of --help: one entry per flag, its meaning wrapped to `width` columns, with
  // "(default X)" where there is one.
  std::string usage(size_t width = 100) const;
  // The docs table: | Flag | Default | Meaning |.
  std::string markdown() const;

  const std::deque<Flag>& flags() const { return flags_; }
  const std::string& program() const { return program_; }

  // A whole number in [min, max] (the rule every integer flag uses; also for flags whose value
  // has integer parts).
  static Result<int64_t> parseInteger(std::string_view v, int64_t min, int64_t max);

 private:
  // A whole number of `unit_ns` units in [min, max], stored in nanoseconds.
  Flag& wholeUnits(std::string name, std::string placeholder, int64_t unit_ns, int64_t* out_ns,
                   int64_t min, int64_t max, std::string help);
  static std::string oneOfError(std::string_view v, size_t n,
                                const std::function<std::string_view(size_t)>& word);
  const Flag* find(std::string_view name) const;

  std::string program_;
  std::deque<Flag> flags_;  // a deque: references returned by add() stay valid
  size_t max_positionals_ = 0;
};

// What a program's flag table writes: the flag list of --help and the docs table, with the
// defaults of a default-constructed Config.
struct FlagDocs {
  std::string usage;
  std::string markdown;
};
template <typename Config>
FlagDocs flagDocs(std::string program, void (*add)(FlagTable&, Config*)) {
  Config defaults;
  FlagTable table(std::move(program));
  add(table, &defaults);
  return {table.usage(), table.markdown()};
}

// "<program>: <message>\n(see <program> --help)\n" for a usage error, as every program prints it.
std::string usageErrorText(std::string_view program, const Status& status);

// The lines between "<!-- BEGIN generated by TAG -->" and "<!-- END generated -->" in `doc`
// (the docs tables the tables write), or kNotFound.
Result<std::string> generatedBlock(std::string_view doc, std::string_view tag);

}  // namespace tq
