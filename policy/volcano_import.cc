#include "policy/volcano_import.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <set>

#include "common/tenant_shm.h"
#include "common/units.h"
#include "policy/hypernode_import.h"

namespace tq::policy {
namespace {

// Distinct hardware classes handed out in queue order: SL 1..15 (0 is left to untagged
// traffic), and the AF DSCP code points (AF31, AF21, AF11, AF41, then their higher drop
// precedences), the first two as in examples/policy.yaml.
constexpr uint32_t kDscps[] = {26, 18, 10, 34, 28, 20, 12, 36, 30, 22, 14, 38};
constexpr uint32_t kMaxAssignedServiceLevel = 15;

struct Queue {
  std::string name;
  std::string tenant;                                         // "" = TODO
  std::string weight, guarantee, limit, service_level, dscp;  // value text, or "" = TODO
  std::vector<std::string> todo_reasons;                      // parallel "# TODO" comments
};

class Importer {
 public:
  Importer(std::string_view source, const VolcanoImportOptions& options)
      : source_(source), options_(options) {}

  void queue(const YAML::Node& obj, const std::string& path) {
    auto pos = [&](const YAML::Node& n) {
      const YAML::Mark m = n.Mark();
      return std::pair{m.line + 1, m.column + 1};
    };
    auto error = [&](const YAML::Node& n, const std::string& field, std::string reason) {
      auto [line, col] = pos(n);
      out_.errors.push_back({std::string(source_), line, col, field, std::move(reason)});
    };
    if (!obj.IsMap()) return error(obj, path.empty() ? "(document)" : path, "not a mapping");
    const std::string prefix = path.empty() ? "" : path + ".";
    const std::string api = scalar(child(obj, "apiVersion")), kind = scalar(child(obj, "kind"));
    if (kind != "Queue" || api.rfind("scheduling.volcano.sh/", 0) != 0) {
      return error(obj, prefix + "kind",
                   "not a Volcano Queue or HyperNode (apiVersion \"" + api + "\", kind \"" + kind +
                       "\"; expected scheduling.volcano.sh/v1beta1 Queue or "
                       "topology.volcano.sh/v1alpha1 HyperNode)");
    }
    Queue q;
    const YAML::Node metadata = child(obj, "metadata");
    q.name = scalar(child(metadata, "name"));
    if (!isDns1123Subdomain(q.name)) {
      return error(metadata ? metadata : obj, prefix + "metadata.name",
                   "the queue's name \"" + q.name + "\" is not a Kubernetes object name");
    }
    if (!seen_.insert(q.name).second) {
      return error(child(metadata, "name"), prefix + "metadata.name",
                   "queue \"" + q.name + "\" is given twice");
    }
    auto todo = [&](std::string* value, std::string reason) {
      value->clear();
      q.todo_reasons.push_back(std::move(reason));
      out_.todos.push_back("queue \"" + q.name + "\": " + q.todo_reasons.back());
    };
    if (isDns1123Label(q.name)) {
      q.tenant = q.name;
    } else {
      todo(&q.tenant, "the queue's name is not a DNS-1123 label: choose a tenant name");
    }
    const YAML::Node weight = child(child(obj, "spec"), "weight");
    q.weight = weight ? scalar(weight) : "1";  // Volcano's default weight
    uint32_t w = 0;
    auto [end, ec] = std::from_chars(q.weight.data(), q.weight.data() + q.weight.size(), w);
    if (ec != std::errc() || end != q.weight.data() + q.weight.size() || w < 1 || w > kMaxWeight) {
      todo(&q.weight, "spec.weight \"" + q.weight + "\" is not an integer in 1.." +
                          std::to_string(kMaxWeight));
    }
    const YAML::Node annotations = child(metadata, "annotations");
    for (auto [value, key] :
         {std::pair{&q.guarantee, kGuaranteeAnnotation}, std::pair{&q.limit, kLimitAnnotation}}) {
      const YAML::Node a = child(annotations, std::string(key).c_str());
      if (!a) {
        todo(value, "no " + std::string(key) + " annotation: set the rate");
        continue;
      }
      auto rate = parseRate(scalar(a));
      if (!rate.ok()) {
        todo(value, std::string(key) + " \"" + scalar(a) + "\": " + rate.status().message());
      } else {
        *value = exactRateText(*rate);
      }
    }
    const size_t i = queues_.size();
    if (i < kMaxAssignedServiceLevel && i < std::size(kDscps)) {
      q.service_level = std::to_string(i + 1);
      q.dscp = std::to_string(kDscps[i]);
    } else {
      todo(&q.service_level,
           "more queues than distinct classes: choose serviceLevel and dscp "
           "(or shareClass: true)");
    }
    queues_.push_back(std::move(q));
  }

  void document(const YAML::Node& doc) {
    if (doc.IsNull()) return;
    const std::string kind = scalar(child(doc, "kind"));
    // kubectl get -o yaml: List, QueueList, HyperNodeList; `get queues,hypernodes` mixes both.
    if (kind.size() >= 4 && kind.ends_with("List")) {
      const YAML::Node items = child(doc, "items");
      if (!items.IsSequence()) {
        out_.errors.push_back({std::string(source_), doc.Mark().line + 1, doc.Mark().column + 1,
                               "items", "a List without an items sequence"});
        return;
      }
      for (size_t i = 0; i < items.size(); ++i) {
        object(items[i], "items[" + std::to_string(i) + "]");
      }
      return;
    }
    object(doc, "");
  }

  void object(const YAML::Node& obj, const std::string& path) {
    if (scalar(child(obj, "kind")) == "HyperNode") {
      hypernodes_.push_back({obj, path});
    } else {
      queue(obj, path);
    }
  }

  VolcanoImport finish() {
    if (queues_.size() > kMaxTenants) {
      out_.errors.push_back({std::string(source_), 0, 0, "(file)",
                             std::to_string(queues_.size()) + " queues, more than the " +
                                 std::to_string(kMaxTenants) + " tenants a policy may have"});
    }
    if (queues_.empty() && hypernodes_.empty() && out_.errors.empty()) {
      out_.errors.push_back(
          {std::string(source_), 0, 0, "(file)", "no Volcano Queue or HyperNode objects"});
    }
    HyperNodeImport topology;
    if (!hypernodes_.empty()) {
      topology =
          importHyperNodes(hypernodes_, source_,
                           {options_.tier_capacity, options_.nodes_yaml, options_.nodes_source});
      out_.errors.insert(out_.errors.end(), topology.errors.begin(), topology.errors.end());
    }
    if (!out_.errors.empty()) return std::move(out_);
    out_.unmapped = std::move(topology.unmapped);
    std::string capacity = options_.capacity ? exactRateText(*options_.capacity) : "";
    if (capacity.empty() && !queues_.empty()) {
      out_.todos.push_back("link \"" + options_.link + "\": set its capacity");
    }
    out_.todos.insert(out_.todos.end(), topology.todos.begin(), topology.todos.end());
    std::string& y = out_.yaml;
    y = "# tenantqosctl import volcano: a policy from the Volcano objects in\n# " +
        std::string(source_) + "\n";
    if (!queues_.empty()) {
      y += "# One tenant per queue, weight from spec.weight, guarantee and limit from the\n"
           "# annotations " +
           std::string(kGuaranteeAnnotation) + " / " + std::string(kLimitAnnotation) +
           ",\n# serviceLevel and dscp assigned in queue order.\n";
    }
    if (!hypernodes_.empty()) {
      y += "# One shared link per HyperNode tier, one group per HyperNode (" +
           std::to_string(out_.unmapped.size()) + " part(s) not mapped).\n";
    }
    if (!out_.todos.empty()) {
      y += "# " + std::to_string(out_.todos.size()) +
           " TODO(s) below: this is not a valid policy until they are filled in.\n";
    }
    y += "apiVersion: " + std::string(kApiVersion) + "\nkind: " + std::string(kKind) + "\n";
    if (queues_.empty()) {
      y += "links: []\n";
    } else {
      y += "links:\n  - name: " + options_.link + "\n    capacity: " + value(capacity) +
           (capacity.empty() ? "  # TODO: the link's capacity (or --capacity RATE)" : "") +
           "\n    headroom: 0%\n";
    }
    y += topology.yaml;
    y += queues_.empty() ? "tenants: []\n" : "tenants:\n";
    for (const Queue& q : queues_) {
      for (const std::string& r : q.todo_reasons) y += "  # TODO: " + r + "\n";
      y += "  - name: " + value(q.tenant) + "\n";
      y += "    link: " + options_.link + "\n";
      y += "    guarantee: " + value(q.guarantee) + "\n";
      y += "    limit: " + value(q.limit) + "\n";
      y += "    weight: " + value(q.weight) + "\n";
      y += "    serviceLevel: " + value(q.service_level) + "\n";
      y += "    dscp: " + value(q.service_level.empty() ? "" : q.dscp) + "\n";
      y += "    volcanoQueues: [" + q.name + "]\n";
    }
    return std::move(out_);
  }

 private:
  static std::string value(const std::string& v) { return v.empty() ? "TODO" : v; }
  static std::string scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.Scalar() : ""; }
  // The value under `key` of a mapping; a null Node when `n` is not a mapping or lacks it
  // (yaml-cpp's operator[] throws on non-maps and on missing parents).
  static YAML::Node child(const YAML::Node& n, const char* key) {
    if (!n || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  std::string_view source_;
  const VolcanoImportOptions& options_;
  VolcanoImport out_;
  std::vector<Queue> queues_;
  std::vector<HyperNodeObject> hypernodes_;
  std::set<std::string> seen_;
};

}  // namespace

VolcanoImport importVolcanoQueues(std::string_view text, std::string_view source_name,
                                  const VolcanoImportOptions& options) {
  VolcanoImport failed;
  if (text.size() > kMaxPolicyBytes) {
    failed.errors.push_back({std::string(source_name), 1, 1, "(file)",
                             "more than " + std::to_string(kMaxPolicyBytes) + " bytes"});
    return failed;
  }
  if (!isDns1123Label(options.link)) {
    failed.errors.push_back({std::string(source_name), 0, 0, "--link",
                             "\"" + options.link + "\" is not a DNS-1123 label"});
    return failed;
  }
  Importer importer(source_name, options);
  // yaml-cpp reports errors by exception (its depth guard included); nothing escapes.
  try {
    for (const YAML::Node& doc : YAML::LoadAll(std::string(text))) importer.document(doc);
  } catch (const YAML::Exception& e) {
    failed.errors.push_back({std::string(source_name), e.mark.line + 1, e.mark.column + 1, "(yaml)",
                             "syntax error: " + e.msg});
    return failed;
  }
  return importer.finish();
}

}  // namespace tq::policy
