#include "nccl-plugin/params.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/units.h"

namespace tq::plugin {
namespace {

constexpr ParamSpec kSpecs[] = {
#define TQ_PLUGIN_PARAM_SPEC(field, env, type, ptype, def, lo, hi, meaning) \
  {env, ParamType::ptype, def, lo, hi, meaning},
    TQ_PLUGIN_PARAMS(TQ_PLUGIN_PARAM_SPEC)
#undef TQ_PLUGIN_PARAM_SPEC
};

Result<int64_t> parseInt(const ParamSpec& spec, std::string_view text) {
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end == nullptr || *end != '\0' || errno != 0) {
    return invalidArgument(std::string(spec.env) + "=\"" + s + "\": not an integer");
  }
  if (v < spec.min || v > spec.max) {
    return invalidArgument(std::string(spec.env) + "=" + s + ": out of range [" +
                           std::to_string(spec.min) + ", " + std::to_string(spec.max) + "]");
  }
  return static_cast<int64_t>(v);
}

// "[4KiB, 1GiB]", or ">= 4KiB" without an upper bound; in the parameter's unit.
std::string unsignedRange(const ParamSpec& spec) {
  auto text = [&](int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    return spec.type == ParamType::kRate ? formatRate(u) : formatSize(u);
  };
  if (spec.max > 0) return "[" + text(spec.min) + ", " + text(spec.max) + "]";
  return ">= " + text(spec.min);
}

Result<uint64_t> parseUnsigned(const ParamSpec& spec, std::string_view text) {
  Result<uint64_t> v = spec.type == ParamType::kRate ? parseRate(text) : parseSize(text);
  if (!v.ok()) return v.status().withContext(spec.env);
  if (*v < static_cast<uint64_t>(spec.min) ||
      (spec.max > 0 && *v > static_cast<uint64_t>(spec.max))) {
    return invalidArgument(std::string(spec.env) + "=" + std::string(text) + ": out of range " +
                           unsignedRange(spec));
  }
  return *v;
}

// One overload per C++ field type; `text` is the variable's value or the default text.
Status assign(const ParamSpec& /*spec*/, std::string_view text, std::string* out) {
  *out = std::string(text);
  return okStatus();
}
Status assign(const ParamSpec& spec, std::string_view text, int64_t* out) {
  TQ_ASSIGN_OR_RETURN(*out, parseInt(spec, text));
  return okStatus();
}
Status assign(const ParamSpec& spec, std::string_view text, std::optional<int64_t>* out) {
  if (text.empty()) {
    out->reset();
    return okStatus();
  }
  TQ_ASSIGN_OR_RETURN(int64_t v, parseInt(spec, text));
  *out = v;
  return okStatus();
}
Status assign(const ParamSpec& spec, std::string_view text, uint64_t* out) {
  TQ_ASSIGN_OR_RETURN(*out, parseUnsigned(spec, text));
  return okStatus();
}
Status assign(const ParamSpec& spec, std::string_view text, std::optional<uint64_t>* out) {
  if (text.empty()) {
    out->reset();
    return okStatus();
  }
  TQ_ASSIGN_OR_RETURN(uint64_t v, parseUnsigned(spec, text));
  *out = v;
  return okStatus();
}

const char* typeName(ParamType t) {
  switch (t) {
    case ParamType::kString: return "string";
    case ParamType::kInt: return "integer";
    case ParamType::kSize: return "size";
    case ParamType::kRate: return "rate";
    case ParamType::kMillis: return "milliseconds";
  }
  return "?";
}

}  // namespace

std::span<const ParamSpec> paramSpecs() { return kSpecs; }

EnvLookup processEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

Result<PluginParams> loadParams(const EnvLookup& env) {
  PluginParams p;
  size_t i = 0;
#define TQ_PLUGIN_PARAM_LOAD(field, envname, type, ptype, def, lo, hi, meaning) \
  {                                                                             \
    const ParamSpec& spec = kSpecs[i++];                                        \
    const char* set = env(envname);                                             \
    /* An empty value means "unset", as for NCCL's own variables. */            \
    const char* text = (set != nullptr && set[0] != '\0') ? set : def;          \
    TQ_RETURN_IF_ERROR(assign(spec, text, &p.field));                           \
  }
  TQ_PLUGIN_PARAMS(TQ_PLUGIN_PARAM_LOAD)
#undef TQ_PLUGIN_PARAM_LOAD
  return p;
}

std::string describeNonDefault(const EnvLookup& env) {
  std::string out;
  for (const ParamSpec& spec : kSpecs) {
    const char* v = env(spec.env);
    if (v == nullptr || v[0] == '\0' || std::strcmp(v, spec.default_text) == 0) continue;
    if (!out.empty()) out += ' ';
    out += spec.env;
    out += '=';
    out += v;
  }
  return out;
}

std::string paramsMarkdownTable() {
  std::string out = "| Variable | Type | Default | Meaning |\n|---|---|---|---|\n";
  for (const ParamSpec& spec : kSpecs) {
    std::string type = typeName(spec.type);
    if ((spec.type == ParamType::kInt || spec.type == ParamType::kMillis) && spec.max > spec.min) {
      type += " " + std::to_string(spec.min) + "-" + std::to_string(spec.max);
    } else if ((spec.type == ParamType::kSize || spec.type == ParamType::kRate) &&
               (spec.min > 0 || spec.max > 0)) {
      type += " " + unsignedRange(spec);
    }
    const std::string def =
        spec.default_text[0] != '\0' ? "`" + std::string(spec.default_text) + "`" : "unset";
    out +=
        "| `" + std::string(spec.env) + "` | " + type + " | " + def + " | " + spec.meaning + " |\n";
  }
  return out;
}

}  // namespace tq::plugin
