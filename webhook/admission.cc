#include "webhook/admission.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <map>

namespace tq::webhook {
namespace {

using Json = nlohmann::json;

// The recipe's fixed names (docs/deploy.md, deploy/kubernetes/training-pod-example.yaml).
constexpr std::string_view kPluginVolume = "tenantqos-plugin";  // emptyDir; also the init container
constexpr std::string_view kTenantVolume = "tenantqos-tenant";  // the tenant's run-dir entry
constexpr std::string_view kNcclPlugin = "tenantqos";           // NCCL_NET_PLUGIN and NCCL_NET
// The node contract (common/node_contract.h): the agent makes one directory per tenant (its
// attach socket inside), mounted as a hostPath of kTenantDirHostPathType.
constexpr std::string_view kTenantEntryType = kTenantDirHostPathType;
constexpr std::string_view kEnvPrefix = kPluginEnvPrefix;
constexpr size_t kMaxReasons = 10;  // listed in one refusal

std::string tenantEntry(const RecipeOptions& o, const std::string& tenant) {
  return attach::tenantDir(o.run_dir, tenant);
}

// JSON pointer token (RFC 6901): "~" -> "~0", "/" -> "~1".
std::string pointerToken(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// Typed accessors that never throw: a missing or mistyped field reads as absent.
const Json* field(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
std::string str(const Json& obj, std::string_view key) {
  const Json* v = field(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}
const Json& sub(const Json& obj, std::string_view key) {  // an object, or an empty one
  static const Json kEmpty = Json::object();
  const Json* v = field(obj, key);
  return v != nullptr && v->is_object() ? *v : kEmpty;
}
// Serialises without throwing: text cut by inQuotes() may end inside a UTF-8 sequence.
std::string dumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}
const Json& arr(const Json& obj, std::string_view key) {
  static const Json kEmpty = Json::array();
  const Json* v = field(obj, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

bool within(const std::string& path, const std::string& dir) {  // path is dir or below it
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         (dir == "/" || path[dir.size()] == '/'));
}

std::string inQuotes(const std::string& s) {
  std::string out = "\"";
  for (char c : s.substr(0, 200)) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return out + (s.size() > 200 ? "...\"" : "\"");
}

struct Op {
  Json op;
  std::string what;  // "adds volume tenantqos-tenant", for a refusal that lists what is missing
};

// One pass over a pod against its tenant's recipe: `conflicts` are settings of the pod's own
// that contradict it (the pod is refused), `ops` add what the recipe needs and the pod lacks.
// Running it on the patched pod gives no ops: /validate's "the recipe is there" is this check.
struct Check {
  std::vector<std::string> conflicts;
  std::vector<Op> ops;
};

class PodChecker {
 public:
  PodChecker(const Json& pod, const TenantMatch& match, const RecipeOptions& o)
      : pod_(pod), match_(match), o_(o) {
    if (match.tenant != nullptr) {
      tenant_ = match.tenant->name;
      entry_ = normalPath(tenantEntry(o, tenant_));
      group_ = podGroup(*match.tenant, o);
    }
  }

  Check run(const PolicySpec& policy) {
    checkLabel();
    checkVolumes();
    checkGroups(policy);
    const Json& spec = sub(pod_, "spec");
    for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
      const Json& cs = arr(spec, list);
      for (size_t i = 0; i < cs.size(); ++i) checkContainer(cs[i], list, i);
    }
    if (has_tenant()) {
      addInitContainer();
      addGroup();
    }
    return std::move(out_);
  }

 private:
  bool has_tenant() const { return match_.tenant != nullptr; }

  void conflict(std::string what) {
    out_.conflicts.push_back(what +
                             (has_tenant() ? "" : ": the pod has no tenant (" + match_.why + ")"));
  }
  void add(std::string path, Json value, std::string what) {
    out_.ops.push_back({Json{{"op", "add"}, {"path", std::move(path)}, {"value", std::move(value)}},
                        std::move(what)});
  }

  void checkLabel() {
    const Json& meta = sub(pod_, "metadata");
    const Json* labels = field(meta, "labels");
    const Json* label = labels != nullptr ? field(*labels, kTenantLabel) : nullptr;
    if (label != nullptr) {
      const std::string v = label->is_string() ? label->get<std::string>() : dumpJson(*label);
      if (v != tenant_) {
        conflict("label " + std::string(kTenantLabel) + "=" + inQuotes(v) +
                 (has_tenant()
                      ? " contradicts its tenant " + inQuotes(tenant_) + " (" + match_.why + ")"
                      : ""));
      }
      return;
    }
    if (!has_tenant()) return;
    if (labels != nullptr && labels->is_object()) {
      add("/metadata/labels/" + pointerToken(kTenantLabel), tenant_,
          "label " + std::string(kTenantLabel));
    } else {
      add("/metadata/labels", Json{{std::string(kTenantLabel), tenant_}},
          "label " + std::string(kTenantLabel));
    }
  }

  Json pluginVolume() const {
    return {{"name", kPluginVolume}, {"emptyDir", {{"sizeLimit", "64Mi"}}}};
  }
  Json tenantVolume() const {
    return {{"name", kTenantVolume},
            {"hostPath", {{"path", tenantEntry(o_, tenant_)}, {"type", kTenantEntryType}}}};
  }

  void checkVolumes() {
    const Json& spec = sub(pod_, "spec");
    const std::string run_dir = normalPath(o_.run_dir);
    bool have_plugin = false, have_tenant = false;
    for (const Json& v : arr(spec, "volumes")) {
      const std::string name = str(v, "name");
      const Json* hp = field(v, "hostPath");
      if (hp != nullptr) {
        const std::string path = normalPath(str(*hp, "path"));
        const bool ours = name == kTenantVolume && has_tenant() && path == entry_ &&
                          str(*hp, "type") == kTenantEntryType;
        if (ours) {
          have_tenant = true;
          continue;
        }
        // At, above or below the run directory: another tenant's entry, or all of them. A
        // `..` is refused outright: a symlink on the host makes it mean anything.
        if (within(path, run_dir) || within(run_dir, path) || path == "/.." ||
            path.find("/../") != std::string::npos || path.ends_with("/..")) {
          conflict("volume " + inQuotes(name) + " mounts host path " + inQuotes(str(*hp, "path")) +
                   (has_tenant() ? ": a pod of tenant " + inQuotes(tenant_) +
                                       " may mount only its own entry " + inQuotes(entry_) +
                                       " (type " + std::string(kTenantEntryType) + ")"
                                 : ""));
          continue;
        }
      }
      if (name == kPluginVolume && v == pluginVolume()) {
        have_plugin = true;
      } else if (name == kPluginVolume || name == kTenantVolume) {
        conflict("volume name " + inQuotes(name) + " is reserved for tenantqos's recipe");
      }
    }
    if (!has_tenant()) return;
    Json missing = Json::array();
    std::string what;
    for (Json v : {pluginVolume(), tenantVolume()}) {
      if ((v["name"] == kPluginVolume ? have_plugin : have_tenant)) continue;
      what += (what.empty() ? "volume " : ", volume ") + v["name"].get<std::string>();
      missing.push_back(std::move(v));
    }
    addToList(spec, "/spec", "volumes", std::move(missing), what);
  }

  // The recipe's variables for a main container, in order; LD_LIBRARY_PATH is handled apart.
  std::vector<std::pair<std::string, std::string>> recipeEnv() const {
    return {{"NCCL_NET_PLUGIN", std::string(kNcclPlugin)},
            {"NCCL_NET", std::string(kNcclPlugin)},
            {kTenantEnv, tenant_},
            {kRunDirEnv, o_.run_dir}};
  }

  void checkContainer(const Json& c, const char* list, size_t index) {
    const std::string name = str(c, "name");
    const std::string where = "container " + inQuotes(name);
    const std::string base = "/spec/" + std::string(list) + "/" + std::to_string(index);
    const bool main = std::string_view(list) == "containers";
    if (std::string_view(list) == "initContainers" && name == kPluginVolume) {
      if (!has_tenant() || c != initContainer()) {
        conflict("init container name " + inQuotes(name) + " is reserved for tenantqos's recipe");
      }
      have_init_ = has_tenant();
      return;
    }
    const std::vector<std::pair<std::string, std::string>> want =
        has_tenant() && main ? recipeEnv() : std::vector<std::pair<std::string, std::string>>{};
    std::vector<bool> present(want.size(), false);
    const Json& env = arr(c, "env");
    bool ld_done = !(has_tenant() && main);
    for (size_t k = 0; k < env.size(); ++k) {
      const std::string var = str(env[k], "name");
      const Json* value = field(env[k], "value");
      const bool literal = field(env[k], "valueFrom") == nullptr;
      const std::string text =
          value != nullptr && value->is_string() ? value->get<std::string>() : std::string();
      auto it = std::find_if(want.begin(), want.end(), [&](auto& w) { return w.first == var; });
      if (it != want.end()) {
        if (!literal || text != it->second) {
          conflict(where + " sets " + var + "=" + (literal ? inQuotes(text) : "(valueFrom)") +
                   ": its tenant's recipe has " + var + "=" + inQuotes(it->second));
        }
        present[it - want.begin()] = true;
        continue;
      }
      if (var.rfind(kEnvPrefix, 0) == 0) {
        conflict(where + " sets " + var + " itself: only tenantqos-webhook sets " +
                 std::string(kEnvPrefix) + "* (the plugin would follow it, not the agent)");
        continue;
      }
      if (var == "LD_LIBRARY_PATH" && !ld_done) {
        ld_done = true;
        if (!literal) {
          conflict(where + " sets LD_LIBRARY_PATH from valueFrom: the recipe must put " +
                   inQuotes(o_.plugin_dir) + " first");
        } else if (text != o_.plugin_dir && text.rfind(o_.plugin_dir + ":", 0) != 0) {
          out_.ops.push_back(
              {Json{{"op", "replace"},
                    {"path", base + "/env/" + std::to_string(k) + "/value"},
                    {"value", text.empty() ? o_.plugin_dir : o_.plugin_dir + ":" + text}},
               where + ": the plugin's directory first on LD_LIBRARY_PATH"});
        }
      }
    }
    Json missing = Json::array();
    for (size_t k = 0; k < want.size(); ++k) {
      if (!present[k]) missing.push_back({{"name", want[k].first}, {"value", want[k].second}});
    }
    if (!ld_done) {
      std::string ld = o_.plugin_dir;
      if (!o_.default_ld_library_path.empty()) ld += ":" + o_.default_ld_library_path;
      missing.push_back({{"name", "LD_LIBRARY_PATH"}, {"value", ld}});
    }
    addToList(c, base, "env", std::move(missing), where + ": environment");
    if (!has_tenant() || !main) return;
    Json mounts = Json::array();
    bool have_plugin = false, have_tenant = false;
    for (const Json& m : arr(c, "volumeMounts")) {
      const std::string vol = str(m, "name");
      if (vol == kPluginVolume) {
        have_plugin = true;
        if (str(m, "mountPath") != o_.plugin_dir || field(m, "subPath") != nullptr) {
          conflict(where + " mounts volume " + inQuotes(vol) + " at " +
                   inQuotes(str(m, "mountPath")) + ": the recipe mounts it at " +
                   inQuotes(o_.plugin_dir));
        }
      } else if (vol == kTenantVolume) {
        have_tenant = true;
        const Json* ro = field(m, "readOnly");
        if (normalPath(str(m, "mountPath")) != entry_ || field(m, "subPath") != nullptr ||
            (ro != nullptr && ro->is_boolean() && ro->get<bool>())) {
          conflict(where + " mounts volume " + inQuotes(vol) + " at " +
                   inQuotes(str(m, "mountPath")) + ": the plugin opens " + inQuotes(entry_) +
                   " read-write");
        }
      }
    }
    if (!have_plugin) {
      mounts.push_back({{"name", kPluginVolume}, {"mountPath", o_.plugin_dir}, {"readOnly", true}});
    }
    if (!have_tenant) mounts.push_back({{"name", kTenantVolume}, {"mountPath", entry_}});
    addToList(c, base, "volumeMounts", std::move(mounts), where + ": volume mounts");
  }

  // Appends `items` to c[key] (creating the list when the container has none).
  void addToList(const Json& c, const std::string& base, const char* key, Json items,
                 const std::string& what) {
    if (items.empty()) return;
    const Json* list = field(c, key);
    if (list == nullptr || !list->is_array()) {
      add(base + "/" + key, std::move(items), what);
      return;
    }
    for (Json& item : items) add(base + "/" + key + "/-", std::move(item), what);
  }

  Json initContainer() const {
    return {
        {"name", kPluginVolume},
        {"image", o_.image},
        {"imagePullPolicy", "IfNotPresent"},
        {"command", {"cp", o_.plugin_in_image, o_.plugin_dir + "/"}},
        {"resources",
         {{"requests", {{"cpu", "10m"}, {"memory", "16Mi"}}}, {"limits", {{"memory", "64Mi"}}}}},
        {"securityContext",
         {{"runAsNonRoot", true},
          {"runAsUser", 65532},
          {"allowPrivilegeEscalation", false},
          {"readOnlyRootFilesystem", true},
          {"capabilities", {{"drop", {"ALL"}}}}}},
        {"volumeMounts", {{{"name", kPluginVolume}, {"mountPath", o_.plugin_dir}}}}};
  }

  void addInitContainer() {
    if (have_init_) return;
    const Json& spec = sub(pod_, "spec");
    const Json* inits = field(spec, "initContainers");
    if (inits == nullptr || !inits->is_array()) {
      add("/spec/initContainers", Json::array({initContainer()}), "init container");
    } else {
      add("/spec/initContainers/-", initContainer(), "init container");
    }
  }

  // The tenant's own unixGroup when it is numeric: the agent gives that group the tenant's
  // directory, so only its pods can attach. A group name cannot be resolved here (it is a
  // name on the nodes, and a pod needs a number), so such tenants get --group, as do tenants
  // without a unixGroup.
  static std::optional<uint32_t> podGroup(const TenantSpec& t, const RecipeOptions& o) {
    if (const auto gid = numericGroup(t.unix_group)) return gid;
    return o.group;
  }
  // A unixGroup that is a gid; a name (resolved on the nodes only) or none: nullopt.
  static std::optional<uint32_t> numericGroup(const std::string& g) {
    uint32_t gid = 0;
    const auto [end, ec] = std::from_chars(g.data(), g.data() + g.size(), gid);
    if (!g.empty() && ec == std::errc() && end == g.data() + g.size()) return gid;
    return std::nullopt;
  }

  // A numeric unixGroup opens its tenant's directory on every node (the agent gives the
  // directory that group and checks the peer's groups), so a pod claiming another tenant's gid
  // in any of the places Kubernetes turns into the process's groups is refused. The webhook's
  // own --group too, should it be some tenant's (the pod's tenant has no numeric group then).
  void checkGroups(const PolicySpec& policy) {
    std::map<uint64_t, const TenantSpec*> owner;
    for (const TenantSpec& t : policy.tenants) {
      if (const auto gid = numericGroup(t.unix_group)) owner.emplace(*gid, &t);
    }
    auto claim = [&](const Json* value, const std::string& where) {
      const std::optional<uint64_t> gid = value != nullptr ? gidOf(*value) : std::nullopt;
      if (!gid) return;
      const auto it = owner.find(*gid);
      if (it == owner.end() || it->second->name == tenant_) return;
      conflict(where + " " + std::to_string(*gid) + " is tenant " + inQuotes(it->second->name) +
               "'s unixGroup" +
               (has_tenant() ? ": a pod of tenant " + inQuotes(tenant_) +
                                   " may claim only its own tenant's group"
                             : ""));
    };
    const Json& spec = sub(pod_, "spec");
    const Json& sc = sub(spec, "securityContext");
    for (const Json& g : arr(sc, "supplementalGroups")) {
      claim(&g, "securityContext.supplementalGroups has");
    }
    claim(field(sc, "runAsGroup"), "securityContext.runAsGroup");
    claim(field(sc, "fsGroup"), "securityContext.fsGroup");
    for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
      for (const Json& c : arr(spec, list)) {
        claim(field(sub(c, "securityContext"), "runAsGroup"),
              "container " + inQuotes(str(c, "name")) + ": securityContext.runAsGroup");
      }
    }
    if (!has_tenant() || !group_) return;
    const auto it = owner.find(*group_);
    if (it != owner.end() && it->second->name != tenant_) {
      conflict("--group " + std::to_string(*group_) + " is tenant " + inQuotes(it->second->name) +
               "'s unixGroup: tenantqos-webhook does not give it to a pod of tenant " +
               inQuotes(tenant_) + " (whose unixGroup " + inQuotes(match_.tenant->unix_group) +
               " is not numeric); set --group to a gid no tenant has, or give tenant " +
               inQuotes(tenant_) + " a numeric unixGroup");
      group_.reset();
    }
  }

  // A gid as Kubernetes writes it: a non-negative integer (a hostile or converted review may
  // spell it 7401.0; anything else is not a group and not ours to judge).
  static std::optional<uint64_t> gidOf(const Json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      return i >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(i)) : std::nullopt;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (d >= 0 && d < 18446744073709551616.0 &&
          d == static_cast<double>(static_cast<uint64_t>(d))) {
        return static_cast<uint64_t>(d);
      }
    }
    return std::nullopt;
  }

  void addGroup() {
    if (!group_) return;
    const uint32_t gid = *group_;
    const Json& spec = sub(pod_, "spec");
    const Json* sc = field(spec, "securityContext");
    const std::string what = "supplemental group " + std::to_string(gid);
    if (sc == nullptr || !sc->is_object()) {
      add("/spec/securityContext", Json{{"supplementalGroups", {gid}}}, what);
      return;
    }
    const Json* groups = field(*sc, "supplementalGroups");
    if (groups == nullptr || !groups->is_array()) {
      add("/spec/securityContext/supplementalGroups", Json::array({gid}), what);
      return;
    }
    for (const Json& g : *groups) {
      if (g.is_number_unsigned() && g.get<uint64_t>() == gid) return;
    }
    add("/spec/securityContext/supplementalGroups/-", gid, what);
  }

  const Json& pod_;
  const TenantMatch& match_;
  const RecipeOptions& o_;
  std::string tenant_;
  std::string entry_;
  std::optional<uint32_t> group_;  // the supplemental group to add (podGroup)
  bool have_init_ = false;
  Check out_;
};

Json reviewResponse(const std::string& uid, bool allowed, int code, const std::string& message) {
  Json r = {{"uid", uid}, {"allowed", allowed}};
  if (!allowed || !message.empty()) r["status"] = {{"code", code}, {"message", message}};
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"response", r}};
}

ReviewResult plainError(int status, std::string message) {
  ReviewResult r;
  r.http_status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = "tenantqos-webhook: " + message + "\n";
  r.outcome = "error";
  r.message = std::move(message);
  return r;
}

ReviewResult answer(const std::string& uid, bool allowed, int code, std::string message,
                    std::string outcome, const Json* patch = nullptr) {
  ReviewResult r;
  Json review = reviewResponse(uid, allowed, code, allowed ? "" : message);
  if (patch != nullptr) {
    review["response"]["patchType"] = "JSONPatch";
    review["response"]["patch"] = base64(dumpJson(*patch));
  }
  r.body = dumpJson(review);
  r.outcome = std::move(outcome);
  r.message = std::move(message);
  return r;
}

}  // namespace

TenantMatch resolveTenant(const PolicySpec& policy, std::string_view namespace_name,
                          std::string_view volcano_queue,
                          const std::vector<std::string>& queue_namespaces) {
  auto has = [](const std::vector<std::string>& v, std::string_view s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  const std::string ns = inQuotes(std::string(namespace_name));
  const std::string queue = inQuotes(std::string(volcano_queue));
  const TenantSpec* by_namespace = nullptr;
  const TenantSpec* by_queue = nullptr;
  const TenantSpec* by_default = nullptr;
  for (const TenantSpec& t : policy.tenants) {
    if (by_namespace == nullptr && has(t.namespaces, namespace_name)) by_namespace = &t;
    if (by_queue == nullptr && !volcano_queue.empty() && has(t.volcano_queues, volcano_queue)) {
      by_queue = &t;
    }
    if (by_default == nullptr && t.is_default) by_default = &t;
  }
  // The annotation is the pod author's: it agrees with the namespace or is refused.
  if (by_namespace != nullptr) {
    if (by_queue != nullptr && by_queue != by_namespace) {
      return {nullptr, "",
              "Volcano queue " + queue + " is tenant " + inQuotes(by_queue->name) +
                  "'s, but namespace " + ns + " is tenant " + inQuotes(by_namespace->name) +
                  "'s: a pod's annotation cannot choose another tenant than its namespace's"};
    }
    return {by_namespace, "namespace " + ns};
  }
  if (by_queue != nullptr) {
    if (!has(queue_namespaces, namespace_name)) {
      return {nullptr, "",
              "Volcano queue " + queue + " is tenant " + inQuotes(by_queue->name) +
                  "'s, but namespace " + ns +
                  " has no tenant and is not one of --queue-namespaces (where a pod's queue "
                  "annotation picks its tenant)"};
    }
    return {by_queue, "Volcano queue " + queue};
  }
  if (by_default != nullptr) return {by_default, "the default tenant"};
  std::string why = "namespace " + ns;
  if (!volcano_queue.empty()) why += " and Volcano queue " + queue;
  return {nullptr, why + " belong to no tenant, and the policy has no default tenant"};
}

std::string normalPath(std::string_view p) {
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    size_t end = p.find('/', i);
    if (end == std::string_view::npos) end = p.size();
    const std::string_view part = p.substr(i, end - i);
    if (!part.empty() && part != ".") {
      out += '/';
      out += part;
    }
    i = end + 1;
  }
  if (out.empty()) out = "/";
  if (out == "/var/run" || out.starts_with("/var/run/")) out.erase(0, 4);
  return out;
}

int jsonDepth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

ReviewResult review(Endpoint endpoint, std::string_view body, const VersionedPolicy* policy,
                    const RecipeOptions& options) {
  if (body.size() > kMaxReviewBytes) {
    return plainError(413, "request body of " + std::to_string(body.size()) +
                               " bytes exceeds the limit of " + std::to_string(kMaxReviewBytes));
  }
  if (jsonDepth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return plainError(
        400, "request JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  Json doc = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return plainError(400, "request body is not JSON");
  if (str(doc, "kind") != "AdmissionReview" || str(doc, "apiVersion") != "admission.k8s.io/v1") {
    return plainError(400, "request is not an admission.k8s.io/v1 AdmissionReview (apiVersion " +
                               inQuotes(str(doc, "apiVersion")) + ", kind " +
                               inQuotes(str(doc, "kind")) + ")");
  }
  const Json* req = field(doc, "request");
  const std::string uid = req != nullptr ? str(*req, "uid") : "";
  if (req == nullptr || !req->is_object() || uid.empty()) {
    return plainError(400, "AdmissionReview without request.uid");
  }
  const Json* kind = field(*req, "kind");
  const std::string group = kind != nullptr ? str(*kind, "group") : "";
  const std::string k = kind != nullptr ? str(*kind, "kind") : "";
  if (k != "Pod" || !group.empty()) {
    return answer(uid, false, 400,
                  "tenantqos-webhook reviews Pods only, got " +
                      inQuotes((group.empty() ? "" : group + "/") + k) +
                      " (check the webhook configuration's rules)",
                  "error");
  }
  const std::string operation = str(*req, "operation");
  if (operation != "CREATE") {  // pod specs are immutable; labels alone do not mount anything
    return answer(uid, true, 200, "", endpoint == Endpoint::kMutate ? "unchanged" : "allowed");
  }
  const Json* pod = field(*req, "object");
  const Json* spec = pod != nullptr ? field(*pod, "spec") : nullptr;
  if (spec == nullptr || !spec->is_object()) {
    return answer(uid, false, 400, "the review's request.object is not a Pod with a spec", "error");
  }
  if (policy == nullptr) {
    return answer(uid, false, 503,
                  "tenantqos-webhook has no policy from tenantqos-policyd yet: cannot tell the "
                  "pod's tenant",
                  "error");
  }
  const std::string ns = str(*req, "namespace");
  const Json& meta = sub(*pod, "metadata");
  const Json* annotations = field(meta, "annotations");
  const std::string queue =
      annotations != nullptr ? str(*annotations, kVolcanoQueueAnnotation) : "";
  const TenantMatch match = resolveTenant(policy->policy, ns, queue, options.queue_namespaces);
  std::string pod_name = str(meta, "name");
  if (pod_name.empty()) pod_name = str(meta, "generateName") + "*";
  std::string subject = "pod " + ns + "/" + pod_name;
  if (!match.refusal.empty())
    return answer(uid, false, 403, subject + ": " + match.refusal, "refused");
  if (match.tenant != nullptr) {
    subject += " (tenant " + inQuotes(match.tenant->name) + ", from its " + match.why + ")";
  }

  Check check = PodChecker(*pod, match, options).run(policy->policy);
  // A hostile pod may hold thousands of offending entries: the message names the first few.
  auto listed = [](std::string m, const std::vector<std::string>& items) {
    for (size_t i = 0; i < items.size() && i < kMaxReasons; ++i) m += (i ? "; " : "") + items[i];
    if (items.size() > kMaxReasons) {
      m += "; and " + std::to_string(items.size() - kMaxReasons) + " more";
    }
    return m;
  };
  if (!check.conflicts.empty()) {
    return answer(uid, false, 403, listed(subject + ": ", check.conflicts), "refused");
  }
  if (endpoint == Endpoint::kValidate) {
    if (!check.ops.empty()) {
      std::vector<std::string> missing;
      for (const Op& op : check.ops) missing.push_back(op.what);
      return answer(uid, false, 403,
                    listed(subject + " lacks its tenant's tenantqos settings (was /mutate "
                                     "skipped?): ",
                           missing),
                    "refused");
    }
    return answer(uid, true, 200, "", "allowed");
  }
  if (check.ops.empty()) return answer(uid, true, 200, "", "unchanged");
  Json patch = Json::array();
  for (Op& op : check.ops) patch.push_back(std::move(op.op));
  return answer(uid, true, 200, "", "mutated", &patch);
}

}  // namespace tq::webhook
