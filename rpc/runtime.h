// Process-wide settings of the gRPC runtime: configureGrpcRuntime() is called first thing in
// main() of every program that makes gRPC objects: policyd, the agent, the webhook,
// tenantqosctl and the benchmarks (tenantqos-perf makes none: it links no gRPC), so that all of
// them run gRPC alike, not only those measured at scale.
//
// Debian builds abseil without NDEBUG, so absl::Mutex (every lock inside gRPC) runs its
// debug-mode deadlock detector: each acquisition records the lock order in one process-wide
// graph under one global lock (absl::synchronization_internal::GraphCycles). With 1,000 streams
// that is thousands of mutexes: profiled in policyd pushing a round of caps to 1,000 agents, a
// third of the round thread's time was GraphCycles::GetId (docs/fabric.md, "Caps through
// gRPC"). Release builds of abseil never track it; neither do we.
#pragma once

namespace tq::rpc {

// Idempotent; before the first gRPC object is made (any thread after is fine, it is atomic).
void configureGrpcRuntime();

}  // namespace tq::rpc
