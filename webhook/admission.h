// The admission logic of tenantqos-webhook: AdmissionReview v1 JSON in, AdmissionReview v1
// JSON out. Pure (no I/O, no clock), so every rule is unit-tested without a server.
//
// A pod's tenant (resolveTenant): its namespace through the policy's namespaces; in a namespace
// of no tenant that the operator lists in queue_namespaces, the Volcano queue of its annotation
// `scheduling.volcano.sh/queue-name` through volcanoQueues; the policy's default tenant; else
// none. Whoever creates a pod writes its annotations, so a queue never overrides the namespace:
// a queue of another tenant than the namespace's (or than none, outside queue_namespaces) is
// refused, not followed.
//
// What a pod may not claim, beyond the recipe: a hostPath at, above or below the run directory
// other than its own tenant's entry (compared after lexical normalisation: `.`, `//`, a trailing
// `/`, a relative path, /var/run), and another tenant's numeric unixGroup as a supplemental
// group, runAsGroup or fsGroup (the group opens that tenant's directory on the nodes).
//
// /mutate adds the pod recipe (podRecipePatch, the one place that knows it) for the pod's
// tenant as a JSONPatch; a pod that already carries tenantqos settings of its own is refused
// with the reasons (the webhook's are the only ones allowed), one already mutated is left alone.
// /validate refuses a pod whose tenantqos settings (TENANTQOS_* variables, host paths at or
// around the run directory, the tenant label) are not exactly its tenant's recipe.
//
// The request body is hostile: its size is bounded by the server (kMaxReviewBytes), its JSON
// nesting by kMaxJsonDepth before parsing, and every field is type-checked before use.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/node_contract.h"
#include "common/policy.h"

namespace tq::webhook {

inline constexpr size_t kMaxReviewBytes = 4u << 20;  // > the API server's 3 MiB object limit
inline constexpr int kMaxJsonDepth = 64;             // a pod is < 20 levels deep
inline constexpr std::string_view kVolcanoQueueAnnotation = "scheduling.volcano.sh/queue-name";
inline constexpr std::string_view kTenantLabel = "tenantqos.io/tenant";

// What the recipe injects besides the tenant's name. Defaults: docs/deploy.md's recipe.
struct RecipeOptions {
  std::string image = "registry.example.com/tenantqos/tenantqos:0.1.0";  // has the plugin
  std::string plugin_in_image = "/usr/local/lib/tenantqos/libnccl-net-tenantqos.so";
  std::string plugin_dir = "/opt/tenantqos/lib";  // the emptyDir in the pod
  std::string run_dir = kDefaultRunDir;           // the agent's --run-dir
  // LD_LIBRARY_PATH of a container that sets none: the plugin's directory, then this (what
  // CUDA images set; Kubernetes cannot append to the image's own value).
  std::string default_ld_library_path = "/usr/local/nvidia/lib64:/usr/local/cuda/lib64";
  // Supplemental group of pods whose tenant has no numeric unixGroup (a tenant's numeric
  // unixGroup is used instead: the agent gives that group the tenant's directory); nullopt:
  // none. Never handed out while it is some tenant's numeric unixGroup (such pods are refused:
  // it would open that tenant's directory to them).
  std::optional<uint32_t> group;
  // Namespaces of no tenant whose pods take their tenant from their Volcano queue annotation
  // (a namespace shared by several tenants' Volcano jobs). Elsewhere the namespace decides.
  std::vector<std::string> queue_namespaces;
};

struct TenantMatch {
  const TenantSpec* tenant = nullptr;  // nullptr: the pod has no tenant
  std::string why;  // "Volcano queue \"q\"", "namespace \"ns\"", "the default tenant", or why not
  // Non-empty: the pod claims a tenant it may not have (its queue annotation against its
  // namespace); the pod is refused with this reason and `tenant` is nullptr.
  std::string refusal;
};

TenantMatch resolveTenant(const PolicySpec& policy, std::string_view namespace_name,
                          std::string_view volcano_queue,
                          const std::vector<std::string>& queue_namespaces = {});

// `path` after lexical normalisation, as the kubelet's host sees it: rooted (a relative path
// is taken from /), `.` and empty components dropped, `..` kept (callers refuse it: a symlink
// makes it non-lexical), no trailing `/`, and /var/run as /run (a symlink on every systemd
// distribution).
std::string normalPath(std::string_view path);

struct ReviewResult {
  int http_status = 200;  // 400 for a body that is not an AdmissionReview at all
  std::string body;       // the AdmissionReview response, or a plain-text error
  std::string content_type = "application/json";
  // For metrics and logs: "mutated", "unchanged", "allowed", "refused" or "error".
  std::string outcome;
  std::string message;  // the refusal or error reason ("" when allowed)
};

enum class Endpoint { kMutate, kValidate };

// `policy` is nullptr before the first policy arrived: every Pod is then refused (503 inside
// the review) rather than admitted without its tenant's settings.
ReviewResult review(Endpoint endpoint, std::string_view body, const VersionedPolicy* policy,
                    const RecipeOptions& options);

// The greatest nesting depth of a JSON text (brackets outside strings), stopping at `limit`+1.
int jsonDepth(std::string_view text, int limit);

}  // namespace tq::webhook
