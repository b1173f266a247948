// Every environment parameter of the NCCL plugin, in ONE table: name, type, default, meaning.
//
// TQ_PLUGIN_PARAMS is the single source: it declares the fields of PluginParams, drives parsing
// and validation, and generates the table in docs/plugin.md (`tenantqos-plugin-params
// --markdown`; the test plugin_docs_params_in_sync fails when the two differ).
//
// Parameters are read once, at the first init() of the process, through an injectable lookup
// (getenv in production), and are immutable afterwards. An invalid value fails init() with a
// message naming the variable, so NCCL falls back to another network loudly rather than running
// with a silently ignored setting.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "common/node_contract.h"  // the names the webhook writes into pods
#include "common/status.h"

namespace tq::plugin {

enum class ParamType {
  kString,
  kInt,     // decimal integer within [min, max]
  kSize,    // bytes: "256KiB", "4MiB", "65536" (common/units parseSize), within [min, max]
  kRate,    // bytes/s: "10Gbps", "1.25GB/s" (common/units parseRate), within [min, max]
  kMillis,  // integer milliseconds within [min, max]
};

// X(field, ENV_NAME, C++ type, ParamType, "default" ("" = unset), min, max, "meaning")
// For sizes and rates a max of 0 means no upper bound; the min always holds.
// Optional types are unset unless the variable is set; the meaning says what unset does.
#define TQ_PLUGIN_PARAMS(X)                                                                        \
  X(tenant, kTenantEnv, std::string, kString, "", 0, 0,                                            \
    "Tenant whose agent socket every communicator of this process tries first (e.g. set from a "   \
    "pod label), before the communicator's trafficClass. Only a choice: a tenant whose socket "    \
    "the process cannot reach gives it the default tenant.")                                       \
  X(default_tenant, "TENANTQOS_DEFAULT_TENANT", std::string, kString, "default", 0, 0,             \
    "Tenant of communicators that neither TENANTQOS_TENANT nor a trafficClass mapping names.")     \
  X(run_dir, kRunDirEnv, std::string, kString, kDefaultRunDir, 0, 0,                               \
    "The agent's run directory: tenants/<tenant>/agent.sock per tenant, agent.sock node-wide. "    \
    "If it exists the node is governed: a process that cannot attach is paced at the default "     \
    "tenant's or a conservative 100 Mbit/s rate, never unpaced.")                                  \
  X(agent_uid, "TENANTQOS_AGENT_UID", int64_t, kInt, "0", 0, 4294967294,                           \
    "The uid the node agent runs as. The plugin trusts an attach socket only when root or this "   \
    "uid answers on it (SO_PEERCRED); any other uid's socket is refused, never its memory.")       \
  X(require_agent, "TENANTQOS_REQUIRE_AGENT", int64_t, kInt, "0", 0, 1,                            \
    "1: init fails when TENANTQOS_RUN_DIR does not exist (no agent on this node) instead of "      \
    "running unpaced with a warning.")                                                             \
  X(rate, "TENANTQOS_RATE", std::optional<uint64_t>, kRate, "", 1, 0,                              \
    "Pacing rate of what the process sends, on a node without an agent (no TENANTQOS_RUN_DIR), "   \
    "e.g. 10Gbps or 1.25GB/s. Unset: unpaced. Ignored on a governed node.")                        \
  X(rx_rate, "TENANTQOS_RX_RATE", std::optional<uint64_t>, kRate, "", 1, 0,                        \
    "Pacing rate of what the process receives (ingress), on a node without an agent. Unset: "      \
    "unpaced. Ignored on a governed node (the agent allocates ingress).")                          \
  X(bucket_depth_us, "TENANTQOS_BUCKET_DEPTH_US", int64_t, kInt, "1000", 10, 1000000,              \
    "Token-bucket depth as time at the bucket's rate when not attached to the agent (the agent "   \
    "gives its own): over any window T a tenant then sends at most rate x (T + this) plus one "    \
    "admission larger than the depth (1 ms: 1 % over 100 ms).")                                    \
  X(burst, "TENANTQOS_BURST", uint64_t, kSize, "4KiB", 4096, 0,                                    \
    "Smallest token-bucket depth when not attached to the agent (the depth is the larger of this " \
    "and rate x TENANTQOS_BUCKET_DEPTH_US). A larger message is admitted from a full bucket and "  \
    "leaves debt.")                                                                                \
  X(catchup_ms, "TENANTQOS_CATCHUP_MS", int64_t, kMillis, "20", 0, 1000,                           \
    "How much sending time a backlogged sender that retries late (descheduled, busy) may make up " \
    "from tokens nobody used, so its long-run rate holds; bounds that extra burst to rate x "      \
    "this, "                                                                                       \
    "and to (limit - rate) x this when the agent gives a limit. 0 disables.")                      \
  X(dscp, "TENANTQOS_DSCP", std::optional<int64_t>, kInt, "", 0, 63,                               \
    "DSCP marked on the tenant's sockets while not attached to the agent (TOS = DSCP << 2). "      \
    "Unset: 0.")                                                                                   \
  X(sl, "TENANTQOS_SL", std::optional<int64_t>, kInt, "", 0, 15,                                   \
    "InfiniBand service level while not attached to the agent; also the default socket "           \
    "priority. Unset: 0.")                                                                         \
  X(priority, "TENANTQOS_PRIORITY", std::optional<int64_t>, kInt, "", 0, 4294967295,               \
    "SO_PRIORITY of every socket. Unset: the tenant's service level. Values above 6 need "         \
    "CAP_NET_ADMIN; if refused the plugin says so once and leaves the priority alone.")            \
  X(transport, "TENANTQOS_TRANSPORT", std::string, kString, "auto", 0, 0,                          \
    "auto, ib or socket. auto: ib when an active RDMA port passes TENANTQOS_IB_HCA and "           \
    "libibverbs loads, else socket; NCCL's log says which and why, once.")                         \
  X(socket_ifname, "TENANTQOS_SOCKET_IFNAME", std::string, kString, "", 0, 0,                      \
    "Interfaces used as devices, NCCL_SOCKET_IFNAME syntax: prefix list \"eth,ens\", \"^\" "       \
    "excludes, \"=\" matches exactly. Unset: every up interface except lo and docker*, or lo "     \
    "when it is the only one. The ib transport runs its out-of-band TCP handshake on the first "   \
    "of them.")                                                                                    \
  X(socket_family, "TENANTQOS_SOCKET_FAMILY", std::string, kString, "", 0, 0,                      \
    "AF_INET or AF_INET6 to restrict device addresses. Unset: IPv4 preferred, else IPv6.")         \
  X(nsocks, "TENANTQOS_NSOCKS", int64_t, kInt, "4", 1, 16,                                         \
    "TCP data streams per communicator (plus one control stream). The listener's value wins.")     \
  X(socket_nthreads, "TENANTQOS_SOCKET_NTHREADS", int64_t, kInt, "1", 1, 16,                       \
    "Helper threads per communicator end that drive the data streams (at most TENANTQOS_NSOCKS "   \
    "are used).")                                                                                  \
  X(socket_inline, "TENANTQOS_SOCKET_INLINE", uint64_t, kSize, "64KiB", 0, 4194304,                \
    "Messages up to this size travel on the control stream, written and read directly by "         \
    "NCCL's thread (lowest latency); larger ones are striped over the data streams.")              \
  X(socket_min_chunk, "TENANTQOS_SOCKET_MIN_CHUNK", uint64_t, kSize, "64KiB", 4096, 1073741824,    \
    "Smallest stripe of a message on one data stream.")                                            \
  X(socket_window_us, "TENANTQOS_SOCKET_WINDOW_US", int64_t, kInt, "0", 0, 1000000,                \
    "Paced socket streams: what may wait in the kernel for a paced end, as time at its bucket's "  \
    "rate, split evenly over the process's paced streams (data and control) of that direction. "   \
    "Receiving: each "                                                                             \
    "stream's receive buffer, so its TCP window (SO_RCVBUF; the sender then holds what the "       \
    "reader has not admitted, a clear-to-send on the wire); sending: each stream's "               \
    "TCP_NOTSENT_LOWAT. What the wire carries above the rate in a window is then about this "      \
    "much. 0 (for now): the kernel's autotuning (MBs per stream); 4000 met the 1.01 cap in the "   \
    "testbed's incast and fabric but cost the spine 0.13-0.16 of its utilisation "                 \
    "(docs/testbed.md).")                                                                          \
  X(socket_window_rtt, "TENANTQOS_SOCKET_WINDOW_RTT", int64_t, kInt, "0", 0, 1,                    \
    "1: a paced receiving stream's window also covers its measured round trip: its share of the "  \
    "rate x (TENANTQOS_SOCKET_WINDOW_US + round trip), the round trip being the kernel's "         \
    "receive-side estimate (TCP_INFO tcpi_rcv_rtt) bounded by the connection's minimum plus "      \
    "TENANTQOS_SOCKET_WINDOW_US, re-read every 20 ms, so a queue on the path (a spine's port) "    \
    "no longer idles the stream while what waits at the reader stays about the configured "        \
    "time. 0 (for now): the configured time alone; on, the testbed's incast and asymmetric met "   \
    "the 1.01 cap but the fabric's spine and alltoall lost as with fixed windows, to receive "     \
    "queue drops (docs/testbed.md).")                                                              \
  X(socket_window_min, "TENANTQOS_SOCKET_WINDOW_MIN", uint64_t, kSize, "8KiB", 4096, 16777216,     \
    "Smallest window of one paced socket stream, and never below 8 segments (TCP_MAXSEG), so a "   \
    "tenant with many streams or a low rate is not stalled by TCP's silly-window avoidance.")      \
  X(ib_hca, "TENANTQOS_IB_HCA", std::string, kString, "", 0, 0,                                    \
    "RDMA ports the ib transport uses, NCCL_IB_HCA syntax: \"mlx5_0:1,mlx5_1\" (name prefixes, "   \
    "optional port), \"^\" excludes, \"=\" matches exactly. Unset: every active port.")            \
  X(ib_gid_index, "TENANTQOS_IB_GID_INDEX", std::optional<int64_t>, kInt, "", 0, 255,              \
    "GID index of every port. Unset: on RoCE the first RoCE v2 GID holding an IPv4-mapped "        \
    "address (else one that is not link-local), on InfiniBand 0.")                                 \
  X(ibverbs_lib, "TENANTQOS_IBVERBS_LIB", std::string, kString, "libibverbs.so.1", 0, 0,           \
    "The libibverbs the ib transport dlopens (soname or path). Nothing links against it, so the "  \
    "plugin loads on hosts without it (and then uses the socket transport).")                      \
  X(ib_cts_dscp, "TENANTQOS_IB_CTS_DSCP", std::optional<int64_t>, kInt, "", 0, 63,                 \
    "RoCE DSCP of the receiving side's QPs, which carry its clear-to-send writes and the ACKs of " \
    "the data it receives. Unset: the sender's DSCP (the receiver adopts the sender's marking).")  \
  X(ib_qps_per_conn, "TENANTQOS_IB_QPS_PER_CONN", int64_t, kInt, "1", 1, 8,                        \
    "RC queue pairs per ib connection; messages rotate over them. The connecting side's value "    \
    "wins.")                                                                                       \
  X(ib_timeout, "TENANTQOS_IB_TIMEOUT", int64_t, kInt, "20", 1, 31,                                \
    "RC QP ACK timeout exponent: one try lasts 4.096 us x 2^N (20: about 4.3 s). With "            \
    "TENANTQOS_IB_RETRY_CNT it bounds how long a lost peer takes to fail a transfer.")             \
  X(ib_retry_cnt, "TENANTQOS_IB_RETRY_CNT", int64_t, kInt, "7", 0, 7,                              \
    "RC QP transport retries before a work request fails.")                                        \
  X(pace_chunk_us, "TENANTQOS_PACE_CHUNK_US", int64_t, kInt, "250", 10, 1000000,                   \
    "Transports pace large messages in chunks of at most rate x this (and at most half the "       \
    "bucket depth), each admitted by the bucket on its own, so the rate holds at millisecond "     \
    "scales, not only on average, and a chunk finds room in the bucket even when its admitter "    \
    "comes back late: ib sends, socket reads and writes.")                                         \
  X(rx_debt_us, "TENANTQOS_RX_DEBT_US", int64_t, kInt, "0", 0, 100000,                             \
    "Receives: how far (time at the rx bucket's rate) a read may take the bucket below empty, so " \
    "a receiving thread that wakes late reads what arrived at once instead of sleeping again for " \
    "each chunk's tokens, and a transfer its paced sender already holds to the rate passes one "   \
    "sleeping stage, not two. Any sender, paced or not, still gets at most rate x (T + depth + "   \
    "this) into the receiver over any window T (TCP holds it once the reader stops). 0: "          \
    "receives wait for their tokens as sends do.")                                                 \
  X(handshake_timeout_ms, "TENANTQOS_HANDSHAKE_TIMEOUT_MS", int64_t, kMillis, "30000", 10,         \
    86400000,                                                                                      \
    "Deadline for connect/accept: a peer that sends nothing, garbage or a partial handshake in "   \
    "this time fails the call with a message.")                                                    \
  X(shm_recheck_ms, "TENANTQOS_SHM_RECHECK_MS", int64_t, kMillis, "1000", 1, 3600000,              \
    "How often a process not attached to its tenant tries again, and an attached one checks its "  \
    "connection to the agent (from isend, never blocking, no extra thread).")                      \
  X(log_level, "TENANTQOS_LOG_LEVEL", std::string, kString, "info", 0, 0,                          \
    "error, warn, info, debug or trace. Lines go to NCCL's logger (prefix NET/tenantqos), which "  \
    "NCCL_DEBUG filters further.")

struct PluginParams {
#define TQ_PLUGIN_PARAM_FIELD(field, env, type, ptype, def, lo, hi, meaning) type field{};
  TQ_PLUGIN_PARAMS(TQ_PLUGIN_PARAM_FIELD)
#undef TQ_PLUGIN_PARAM_FIELD
};

struct ParamSpec {
  const char* env;
  ParamType type;
  const char* default_text;  // "" = unset
  int64_t min;
  int64_t max;
  const char* meaning;
};

std::span<const ParamSpec> paramSpecs();

// Returns the value of an environment variable, or nullptr if unset.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnv();

// Parses every parameter (defaults for unset ones). Errors name the variable and the value.
Result<PluginParams> loadParams(const EnvLookup& env);

// "TENANTQOS_X=value" lines of the parameters that differ from their defaults, for the log.
std::string describeNonDefault(const EnvLookup& env);

// The Markdown table of docs/plugin.md: | Variable | Type | Default | Meaning |.
std::string paramsMarkdownTable();

}  // namespace tq::plugin
