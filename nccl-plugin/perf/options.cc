#include "nccl-plugin/perf/options.h"

#include <charconv>
#include <cstdlib>
#include <limits>

#include "common/flags.h"
#include "common/units.h"

namespace tq::perf {

namespace {

constexpr const char* kUsageHead =
    "usage: tenantqos-perf sendrecv|allreduce|alltoall|incast|pingpong [flags]\n"
    "\n"
    "Modes: sendrecv (rank r sends to r+1, receives from r-1, nccl-tests sendrecv), allreduce\n"
    "(ring reduce-scatter + all-gather of floats, verified), alltoall (every rank sends\n"
    "SIZE/nranks to every other rank, MoE dispatch/combine, one connection per pair), incast\n"
    "(ranks 1..n-1 each send SIZE to rank 0, many-to-one), pingpong (round-trip latency).\n"
    "\n"
    "Ranks: --local N forks N ranks on this host (rendezvous on 127.0.0.1), or --rank R "
    "--nranks N\n"
    "--rendezvous HOST:PORT runs one rank of a multi-process run (rank 0 listens on HOST:PORT).\n"
    "Sizes take K/M/G (KiB/MiB/GiB), nccl-tests style.\n"
    "\n"
    "Flags:\n";

Status setBytes(std::string_view v, uint64_t* out) {
  TQ_ASSIGN_OR_RETURN(*out, parseBytes(std::string(v)));
  return okStatus();
}

// ON_MS:OFF_MS[:PHASE_MS]
Status setOnOff(std::string_view text, Options* o) {
  const std::string v(text);
  long f[3] = {0, 0, -1};
  size_t n = 0;
  const char* p = v.c_str();
  bool ok = false;  // true once a number ended the text
  while (n < 3) {
    char* e = nullptr;
    f[n++] = std::strtol(p, &e, 10);
    if (e == p || (*e != '\0' && *e != ':')) break;
    if (*e == '\0') {
      ok = true;
      break;
    }
    p = e + 1;
  }
  ok = ok && n >= 2;
  if (!ok || f[0] <= 0 || f[1] < 0 || (n == 3 && f[2] < 0)) {
    return invalidArgument(v + ": expected ON_MS:OFF_MS[:PHASE_MS], ON_MS > 0, PHASE_MS >= 0");
  }
  o->on_ms = f[0];
  o->off_ms = f[1];
  o->phase_ms = n == 3 ? f[2] : -1;
  return okStatus();
}

Status setNonNegative(std::string_view text, double* out) {
  const std::string v(text);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= 0)) return invalidArgument(v + ": not a number >= 0");
  *out = x;
  return okStatus();
}

void addPerfFlags(FlagTable& t, Options* o) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  t.integer("--local", "N", &o->local, 1, 1024, "fork N ranks on this host").defaultValue("");
  t.integer("--rank", "R", &o->rank, 0, 1023, "this process's rank (with --nranks, --rendezvous)")
      .defaultValue("");
  t.integer("--nranks", "N", &o->nranks, 1, 1024, "ranks of the run").defaultValue("");
  t.hostPort("--rendezvous", &o->rendezvous, "where rank 0 listens and the others connect");
  t.nonEmpty("--plugin", "NAME|PATH", &o->plugin,
             "the plugin (libnccl-net-NAME.so, also searched in <bindir>/../lib)")
      .defaultText("$NCCL_NET_PLUGIN, else tenantqos");
  t.integer("--abi", "10|11", &o->abi, 10, 11, "force an ABI version").defaultText("v11, else v10");
  t.integer("--dev", "D", &o->dev, 0, 1023, "plugin device");
  t.integer("--trafficclass", "N", &o->traffic_class, 0, kMaxInt,
            "communicator trafficClass (init config in v11, connect in v10)")
      .defaultValue("");
  t.add("--tenant", "NAME", "sets TENANTQOS_TENANT in every rank", [o](std::string_view v) {
    o->env.push_back("TENANTQOS_TENANT=" + std::string(v));
    return okStatus();
  });
  t.add("--env", "NAME=VALUE", "sets an environment variable in every rank (repeatable)",
        [o](std::string_view v) -> Status {
          if (v.find('=') == std::string_view::npos) return invalidArgument("expected NAME=VALUE");
          o->env.emplace_back(v);
          return okStatus();
        })
      .repeated();
  t.add("--rank-env", "R:NAME=VALUE", "sets it in rank R only (repeatable)",
        [o](std::string_view v) -> Status {
          const size_t colon = v.find(':');
          int r = -1;
          auto [end, ec] = std::from_chars(v.data(), v.data() + colon, r);
          if (colon == std::string_view::npos || ec != std::errc() || end != v.data() + colon ||
              r < 0 || v.find('=', colon) == std::string_view::npos) {
            return invalidArgument(std::string(v) + ": expected R:NAME=VALUE");
          }
          o->rank_env.emplace_back(r, std::string(v.substr(colon + 1)));
          return okStatus();
        })
      .repeated();
  t.add("--minbytes", "SIZE", "smallest message of a sweep",
        [o](std::string_view v) {
          o->sizes_set = true;
          return setBytes(v, &o->min_bytes);
        })
      .alias("-b")
      .defaultValue("8");
  t.add("--maxbytes", "SIZE", "largest message of a sweep",
        [o](std::string_view v) {
          o->sizes_set = true;
          return setBytes(v, &o->max_bytes);
        })
      .alias("-e")
      .defaultText("64M (pingpong 64K)");
  t.integer("--stepfactor", "N", &o->step_factor, 2, 1024, "size multiplier of a sweep")
      .alias("-f");
  t.integer("--iters", "N", &o->iters, 1, kMaxInt, "timed iterations per size")
      .alias("-n")
      .defaultText("20 (pingpong 1000)");
  t.integer("--warmup", "N", &o->warmup, 0, kMaxInt, "untimed iterations per size")
      .alias("-w")
      .defaultText("5 (pingpong 100)");
  t.integer("--window", "N", &o->window, 1, 32,
            "messages in flight per connection (at most NCCL_NET_MAX_REQUESTS)");
  t.toggle("--unidirectional", &o->unidirectional, "sendrecv: even ranks send to rank+1 only");
  t.add("--duration", "SEC",
        "sendrecv: stream messages of --size for SEC seconds; allreduce, alltoall, incast: "
        "back-to-back iterations of --size for SEC seconds, each transfer pipelined in --chunk "
        "pieces (like NCCL)",
        [o](std::string_view v) { return setNonNegative(v, &o->duration_s); });
  t.add("--size", "SIZE",
        "message (sendrecv), buffer (allreduce, alltoall) or per-sender (incast) size with "
        "--duration",
        [o](std::string_view v) { return setBytes(v, &o->size); })
      .defaultValue("4M");
  t.add("--chunk", "SIZE",
        "allreduce, alltoall, incast: pipeline chunk, 4 B..1 GiB; --window of them in flight",
        [o](std::string_view v) { return setBytes(v, &o->chunk); })
      .defaultValue("512K");
  t.add("--on-off", "ON_MS:OFF_MS[:PHASE_MS]",
        "allreduce, alltoall, incast: start new iterations only during the first ON_MS of every "
        "ON_MS+OFF_MS "
        "cycle (a tenant going idle and back); cycles from the start, or with PHASE_MS on the "
        "wall clock: on from PHASE_MS past every multiple of the cycle (jobs in phase)",
        [o](std::string_view v) { return setOnOff(v, o); });
  t.integer("--compute-ms", "MS", &o->compute_ms, 0, 86'400'000,
            "allreduce, alltoall, incast: a training step: after each complete iteration, MS "
            "without traffic before the next; prints one \"iteration\" line (JSON) per complete "
            "iteration");
  t.integer("--report-interval", "MS", &o->report_ms, 1, 86'400'000,
            "print per-interval throughput lines (with --duration)")
      .defaultValue("");
  t.toggle("--check", &o->check, "verify received data, one message per size");
  t.toggle("--no-check", &o->check, "do not verify received data", false);
  t.add("--check-all", "", "verify every message", [o](std::string_view) {
    o->check = o->check_all = true;
    return okStatus();
  });
  t.add("--timeout", "SEC", "fail after SEC without progress", [o](std::string_view v) {
     return setNonNegative(v, &o->timeout_s);
   }).defaultValue("30");
  t.toggle("--json", &o->json, "one JSON object per line");
  t.choice<PollMode>(
       "--poll", &o->poll,
       {{"spin", PollMode::kSpin}, {"yield", PollMode::kYield}, {"sleep", PollMode::kSleep}},
       "idle strategy: sleep naps adapting between 50 us and 1 ms after 16 idle "
       "polls")
      .defaultText("sleep (pingpong spin)");
}

}  // namespace

std::string usage() { return kUsageHead + flagDocs("tenantqos-perf", addPerfFlags).usage; }

std::string flagsMarkdown() { return flagDocs("tenantqos-perf", addPerfFlags).markdown; }

Result<uint64_t> parseBytes(const std::string& text) {
  if (!text.empty()) {
    const char last = text.back();
    uint64_t mult = 0;
    if (last == 'K' || last == 'k') mult = 1ull << 10;
    if (last == 'M' || last == 'm') mult = 1ull << 20;
    if (last == 'G' || last == 'g') mult = 1ull << 30;
    if (mult != 0) {
      TQ_ASSIGN_OR_RETURN(uint64_t v, parseSize(text.substr(0, text.size() - 1)));
      return v * mult;
    }
  }
  return parseSize(text);
}

Result<Options> parseArgs(int argc, char** argv) {
  Options o;
  const char* env_plugin = std::getenv("NCCL_NET_PLUGIN");
  o.plugin = env_plugin != nullptr && env_plugin[0] != '\0' ? env_plugin : "tenantqos";
  FlagTable t("tenantqos-perf");
  t.positionals(1);  // the mode
  addPerfFlags(t, &o);
  TQ_ASSIGN_OR_RETURN(FlagTable::Parsed parsed, t.parse(argc, argv));
  if (parsed.help) {
    o.help = true;
    return o;
  }
  if (parsed.positional.empty()) return invalidArgument("missing mode");
  o.mode = parsed.positional.front();
  if (o.mode != "sendrecv" && o.mode != "allreduce" && o.mode != "alltoall" && o.mode != "incast" &&
      o.mode != "pingpong") {
    return invalidArgument("unknown mode \"" + o.mode + "\"");
  }
  o.poll_set = parsed.has("--poll");
  // Bandwidth modes sleep briefly when idle (spinning steals CPU from the plugin's helper
  // threads on small machines); the latency mode spins.
  if (!o.poll_set) o.poll = o.mode == "pingpong" ? PollMode::kSpin : PollMode::kSleep;
  if (o.mode == "pingpong" && !o.sizes_set) {
    o.min_bytes = 8;
    o.max_bytes = 64 << 10;
  }
  if (o.local > 0) {
    if (o.rank >= 0 || !o.rendezvous.empty())
      return invalidArgument("--local excludes --rank/--rendezvous");
    o.nranks = o.local;
  } else if (o.rank < 0 || o.nranks <= 0 || o.rendezvous.empty()) {
    return invalidArgument("give --local N, or --rank R --nranks N --rendezvous HOST:PORT");
  }
  if (o.nranks < 1 || o.nranks > 1024) return invalidArgument("nranks out of range");
  if (o.rank >= o.nranks) return invalidArgument("--rank must be below --nranks");
  if (o.mode == "pingpong" && o.nranks != 2)
    return invalidArgument("pingpong needs exactly 2 ranks");
  if (o.mode == "sendrecv" && o.unidirectional && o.nranks % 2 != 0) {
    return invalidArgument("--unidirectional needs an even number of ranks");
  }
  if ((o.mode == "sendrecv" || o.mode == "alltoall" || o.mode == "incast") && o.nranks < 2)
    return invalidArgument(o.mode + " needs at least 2 ranks");
  if (o.min_bytes > o.max_bytes) return invalidArgument("--minbytes above --maxbytes");
  if (o.report_ms > 0 && o.duration_s <= 0)
    return invalidArgument("--report-interval needs --duration");
  if (o.duration_s > 0 && o.mode == "pingpong") {
    return invalidArgument("--duration applies to sendrecv, allreduce, alltoall and incast");
  }
  if ((o.on_ms > 0 || o.compute_ms != 0) &&
      (o.mode == "sendrecv" || o.mode == "pingpong" || o.duration_s <= 0)) {
    return invalidArgument(
        "--on-off and --compute-ms apply to allreduce, alltoall and incast with --duration");
  }
  if (o.chunk < 4 || o.chunk > (1ull << 30)) return invalidArgument("--chunk must be 4 B..1 GiB");
  return o;
}

}  // namespace tq::perf
