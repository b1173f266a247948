// The admission logic of tenantqos-webhook: AdmissionReview v1 JSON in, AdmissionReview v1
// JSON out. Pure (no I/O, no clock), so every rule is unit-tested without a server.
//
// A pod's tenant, first match wins (resolveTenant): the Volcano queue in its annotation
// `scheduling.volcano.sh/queue-name` through the policy's volcanoQueues; its namespace through
// namespaces; the policy's default tenant; else none.
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
  std::string run_dir = "/run/tenantqos";         // the agent's --run-dir
  // LD_LIBRARY_PATH of a container that sets none: the plugin's directory, then this (what
  // CUDA images set; Kubernetes cannot append to the image's own value).
  std::string default_ld_library_path = "/usr/local/nvidia/lib64:/usr/local/cuda/lib64";
  // Supplemental group of pods whose tenant has no numeric unixGroup (a tenant's numeric
  // unixGroup is used instead: the agent gives that group the tenant's directory); nullopt:
  // none.
  std::optional<uint32_t> group = 7400;
};

struct TenantMatch {
  const TenantSpec* tenant = nullptr;  // nullptr: the pod has no tenant
  std::string why;  // "Volcano queue \"q\"", "namespace \"ns\"", "the default tenant", or why not
};

TenantMatch resolveTenant(const PolicySpec& policy, std::string_view namespace_name,
                          std::string_view volcano_queue);

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
