// tenantqos.v1.PolicyService over gRPC's callback API, on top of PolicyCore.
//
// Every method is registered "raw" (grpc::ByteBuffer in and out) so that this layer parses the
// request itself: bytes that are not a valid message get INVALID_ARGUMENT (the generated typed
// handler would answer INTERNAL, which blames the server), and a new policy snapshot is
// serialised once and shared by every watch stream instead of once per watcher.
//
// Memory a caller can pin: a unary response stays in policyd until the client reads it, so the
// bytes of responses not yet taken are budgeted per identity and in all (ResponseBudget; a
// call beyond it gets RESOURCE_EXHAUSTED at once, before its response exists).
//
// WatchPolicy: one ServerWriteReactor per watcher. Each holds at most one write in flight and
// one pending snapshot (the newest not yet written): a slow watcher skips intermediate versions
// but never receives an older version after a newer one, and memory per watcher is bounded.
// Every method first checks the caller's role (policy/authz.h) from its verified client
// certificate; the identity, never a request field, is what the audit trail records.
// Watch streams are limited per caller identity (RESOURCE_EXHAUSTED beyond the limit).
// Allocate: one ServerBidiReactor per agent stream, a CapsSink of the AllocatorService
// (policy/allocator_service.h): demand reports read one at a time (the next read starts once
// the previous report was taken), caps written with one in flight and one pending (the newest
// replaces it), so memory per stream is bounded.
// Thread-safety: the service is used by gRPC's threads concurrently; closeWatchers() may be
// called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <grpcpp/support/server_interceptor.h>

#include "common/thread_annotations.h"
#include "policy/service.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::policy {

class WatchHub;
class AllocateHub;
class AllocatorService;

using PolicyServiceApi = tenantqos::v1::PolicyService;
using RawPolicyServiceBase = PolicyServiceApi::WithRawCallbackMethod_ApplyPolicy<
    PolicyServiceApi::WithRawCallbackMethod_GetPolicy<
        PolicyServiceApi::WithRawCallbackMethod_ListVersions<
            PolicyServiceApi::WithRawCallbackMethod_Rollback<
                PolicyServiceApi::WithRawCallbackMethod_WatchPolicy<
                    PolicyServiceApi::WithRawCallbackMethod_ReportUsage<
                        PolicyServiceApi::WithRawCallbackMethod_GetUsage<
                            PolicyServiceApi::WithRawCallbackMethod_Allocate<
                                PolicyServiceApi::Service>>>>>>>>;

struct GrpcServiceOptions {
  bool insecure = false;  // the server runs --insecure: callers are unauthenticated admins
  size_t max_streams_per_identity = 16;
  // Bytes of unary responses policyd holds until the client has taken them (a response stays in
  // memory while the client does not read: HTTP/2 flow control), per caller identity and in
  // all. A call whose response would exceed either is answered RESOURCE_EXHAUSTED instead.
  size_t max_response_bytes_per_identity = 32u << 20;
  size_t max_response_bytes = 128u << 20;
};

// The response-bytes budget of GrpcServiceOptions. Thread-safe.
class ResponseBudget {
 public:
  ResponseBudget(size_t per_identity, size_t total) : per_identity_(per_identity), total_(total) {}
  // Takes `bytes` for `identity`, or says why not (the message names both figures).
  Status take(const std::string& identity, size_t bytes);
  void give(const std::string& identity, size_t bytes);
  size_t held() const;

 private:
  const size_t per_identity_, total_;
  mutable Mutex mu_;
  size_t held_ TQ_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, size_t> by_identity_ TQ_GUARDED_BY(mu_);
};

class PolicyGrpcService final : public RawPolicyServiceBase {
 public:
  // Installs itself as `core`'s publisher (and forwards every version to `allocator`). `core`,
  // `metrics` and `allocator` (both may be null: Allocate is then UNIMPLEMENTED) outlive this.
  PolicyGrpcService(PolicyCore& core, PolicydMetrics* metrics, GrpcServiceOptions options = {},
                    AllocatorService* allocator = nullptr);
  ~PolicyGrpcService() override;

  // Ends every open watch stream with UNAVAILABLE("<reason>") and refuses new ones. Call before
  // grpc::Server::Shutdown so that shutdown does not wait for streams that never end.
  void closeWatchers(const std::string& reason);
  size_t allocateStreams() const;
  size_t watcherCount() const;
  // Unary calls whose status is not yet sent, plus open watch streams.
  size_t callsInFlight() const;

  grpc::ServerUnaryReactor* ApplyPolicy(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ListVersions(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* req,
                                         grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Rollback(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchPolicy(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* ReportUsage(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetUsage(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Allocate(
      grpc::CallbackServerContext* ctx) override;

 private:
  PolicyCore& core_;
  PolicydMetrics* metrics_;
  const GrpcServiceOptions options_;
  std::unique_ptr<WatchHub> hub_;
  AllocatorService* allocator_;
  std::unique_ptr<AllocateHub> allocate_hub_;
  std::atomic<int> in_flight_{0};
  ResponseBudget budget_;
};

// The calls policyd serves besides its own service (grpc.health.v1.Health, server reflection),
// gated where the request's method is known, before any handler runs: a caller without a
// tenantqos role (and not --insecure) may call grpc.health.v1.Health/Check only; every other
// streaming call (Health/Watch, reflection) counts against max_streams_per_identity, as
// WatchPolicy does. A refused call is cancelled (the client sees CANCELLED) and logged with
// the identity and why. PolicyService's own methods pass: they authorise and bound themselves.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> makeCallGate(
    GrpcServiceOptions options);

// tq::Status -> grpc::Status with the matching code.
grpc::Status toGrpcStatus(const Status& status);

}  // namespace tq::policy
