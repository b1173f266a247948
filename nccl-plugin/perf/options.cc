#include "nccl-plugin/perf/options.h"

#include <algorithm>
#include <cstdlib>

#include "common/units.h"

namespace tq::perf {

const char kUsage[] =
    "usage: tenantqos-perf sendrecv|allreduce|alltoall|incast|pingpong [options]\n"
    "modes:\n"
    "  sendrecv                  rank r sends to r+1, receives from r-1 (nccl-tests sendrecv)\n"
    "  allreduce                 ring reduce-scatter + all-gather of floats, verified\n"
    "  alltoall                  every rank sends SIZE/nranks to every other rank (MoE\n"
    "                            dispatch/combine), one connection per pair\n"
    "  incast                    ranks 1..n-1 each send SIZE to rank 0 (many-to-one)\n"
    "  pingpong                  round-trip latency between 2 ranks\n"
    "ranks:\n"
    "  --local N                 fork N ranks on this host (rendezvous on 127.0.0.1)\n"
    "  --rank R --nranks N --rendezvous HOST:PORT   one rank of a multi-process run;\n"
    "                            rank 0 listens on HOST:PORT\n"
    "plugin:\n"
    "  --plugin NAME|PATH        default $NCCL_NET_PLUGIN, else tenantqos\n"
    "                            (libnccl-net-NAME.so, also searched in <bindir>/../lib)\n"
    "  --abi 10|11               force an ABI version (default: v11, else v10)\n"
    "  --dev D                   plugin device (default 0)\n"
    "  --trafficclass N          communicator trafficClass (init config in v11, connect in v10)\n"
    "  --tenant NAME             sets TENANTQOS_TENANT\n"
    "  --env NAME=VALUE          sets an environment variable in every rank (repeatable)\n"
    "  --rank-env R:NAME=VALUE   sets it in rank R only (repeatable)\n"
    "sizes and iterations (nccl-tests style; K/M/G = KiB/MiB/GiB):\n"
    "  -b, --minbytes SIZE       default 8\n"
    "  -e, --maxbytes SIZE       default 64M\n"
    "  -f, --stepfactor N        default 2\n"
    "  -n, --iters N             default 20 (pingpong 1000)\n"
    "  -w, --warmup N            default 5 (pingpong 100)\n"
    "  --window N                messages in flight per connection (default 8)\n"
    "  --unidirectional          sendrecv: even ranks send to rank+1 only\n"
    "streaming:\n"
    "  --duration SEC            sendrecv: stream messages of --size for SEC seconds;\n"
    "                            allreduce, alltoall, incast: back-to-back iterations of --size\n"
    "                            for SEC seconds, each transfer pipelined in --chunk pieces\n"
    "                            (like NCCL)\n"
    "  --size SIZE               message (sendrecv), buffer (allreduce, alltoall) or per-sender\n"
    "                            (incast) size (default 4M)\n"
    "  --chunk SIZE              pipeline chunk (default 512K); --window in flight\n"
    "  --on-off ON_MS:OFF_MS[:PHASE_MS]\n"
    "                            allreduce, alltoall, incast: start new iterations only during the "
    "first ON_MS of\n"
    "                            every ON_MS+OFF_MS cycle (a tenant going idle and back); cycles\n"
    "                            from the start, or with PHASE_MS on the wall clock: on from\n"
    "                            PHASE_MS past every multiple of the cycle (jobs in phase)\n"
    "  --compute-ms MS           allreduce, alltoall, incast: a training step: after each\n"
    "                            complete iteration, MS without traffic before the next; prints\n"
    "                            one \"iteration\" line (JSON) per complete iteration\n"
    "  --report-interval MS      print per-interval throughput lines (with --duration)\n"
    "checks and output:\n"
    "  --check / --no-check      verify received data (default on: one message per size)\n"
    "  --check-all               verify every message\n"
    "  --timeout SEC             fail after SEC without progress (default 30)\n"
    "  --poll spin|yield|sleep   idle strategy (default sleep: after 16 idle polls, naps\n"
    "                            adapting between 50 us and 1 ms; pingpong: spin)\n"
    "  --json                    one JSON object per line\n";

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
  if (argc < 2) return invalidArgument("missing mode");
  o.mode = argv[1];
  if (o.mode == "-h" || o.mode == "--help") return invalidArgument("");
  if (o.mode != "sendrecv" && o.mode != "allreduce" && o.mode != "alltoall" && o.mode != "incast" &&
      o.mode != "pingpong") {
    return invalidArgument("unknown mode \"" + o.mode + "\"");
  }
  const char* env_plugin = std::getenv("NCCL_NET_PLUGIN");
  o.plugin = env_plugin != nullptr && env_plugin[0] != '\0' ? env_plugin : "tenantqos";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> Result<std::string> {
      if (i + 1 >= argc) return invalidArgument(a + " needs a value");
      return std::string(argv[++i]);
    };
    auto nextInt = [&]() -> Result<long> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') return invalidArgument(a + " " + v + ": not an integer");
      return x;
    };
    auto nextBytes = [&]() -> Result<uint64_t> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      return parseBytes(v);
    };
    auto nextDouble = [&]() -> Result<double> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x >= 0))
        return invalidArgument(a + " " + v + ": not a number");
      return x;
    };
    if (a == "--local") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.local = static_cast<int>(v);
    } else if (a == "--rank") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.rank = static_cast<int>(v);
    } else if (a == "--nranks") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.nranks = static_cast<int>(v);
    } else if (a == "--rendezvous") {
      TQ_ASSIGN_OR_RETURN(o.rendezvous, next());
    } else if (a == "--plugin") {
      TQ_ASSIGN_OR_RETURN(o.plugin, next());
    } else if (a == "--abi") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.abi = static_cast<int>(v);
    } else if (a == "--dev") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.dev = static_cast<int>(v);
    } else if (a == "--trafficclass") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.traffic_class = static_cast<int>(v);
    } else if (a == "--tenant") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      o.env.push_back("TENANTQOS_TENANT=" + v);
    } else if (a == "--env") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      o.env.push_back(v);
    } else if (a == "--rank-env") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      const size_t colon = v.find(':');
      if (colon == std::string::npos)
        return invalidArgument("--rank-env " + v + ": expected R:NAME=VALUE");
      o.rank_env.emplace_back(std::atoi(v.substr(0, colon).c_str()), v.substr(colon + 1));
    } else if (a == "-b" || a == "--minbytes") {
      TQ_ASSIGN_OR_RETURN(o.min_bytes, nextBytes());
      o.sizes_set = true;
    } else if (a == "-e" || a == "--maxbytes") {
      TQ_ASSIGN_OR_RETURN(o.max_bytes, nextBytes());
      o.sizes_set = true;
    } else if (a == "-f" || a == "--stepfactor") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.step_factor = static_cast<uint64_t>(std::max(1L, v));
    } else if (a == "-n" || a == "--iters") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.iters = static_cast<int>(v);
    } else if (a == "-w" || a == "--warmup") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.warmup = static_cast<int>(v);
    } else if (a == "--window") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.window = static_cast<int>(v);
    } else if (a == "--unidirectional") {
      o.unidirectional = true;
    } else if (a == "--duration") {
      TQ_ASSIGN_OR_RETURN(o.duration_s, nextDouble());
    } else if (a == "--size") {
      TQ_ASSIGN_OR_RETURN(o.size, nextBytes());
    } else if (a == "--chunk") {
      TQ_ASSIGN_OR_RETURN(o.chunk, nextBytes());
    } else if (a == "--on-off") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      // ON_MS:OFF_MS[:PHASE_MS]
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
      o.on_ms = f[0];
      o.off_ms = f[1];
      o.phase_ms = n == 3 ? f[2] : -1;
      if (!ok || o.on_ms <= 0 || o.off_ms < 0 || (n == 3 && f[2] < 0)) {
        return invalidArgument("--on-off " + v +
                               ": expected ON_MS:OFF_MS[:PHASE_MS], ON_MS > 0, PHASE_MS >= 0");
      }
    } else if (a == "--compute-ms") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.compute_ms = v;
    } else if (a == "--report-interval") {
      TQ_ASSIGN_OR_RETURN(long v, nextInt());
      o.report_ms = v;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--no-check") {
      o.check = false;
    } else if (a == "--check-all") {
      o.check = o.check_all = true;
    } else if (a == "--timeout") {
      TQ_ASSIGN_OR_RETURN(o.timeout_s, nextDouble());
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--poll") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      if (v == "spin")
        o.poll = PollMode::kSpin;
      else if (v == "yield")
        o.poll = PollMode::kYield;
      else if (v == "sleep")
        o.poll = PollMode::kSleep;
      else
        return invalidArgument("--poll " + v + ": expected spin, yield or sleep");
      o.poll_set = true;
    } else if (a == "-h" || a == "--help") {
      return invalidArgument("");
    } else {
      return invalidArgument("unknown option " + a);
    }
  }
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
  if (o.window < 1 || o.window > 32)
    return invalidArgument("--window must be 1..32 (NCCL_NET_MAX_REQUESTS)");
  if (o.report_ms > 0 && o.duration_s <= 0)
    return invalidArgument("--report-interval needs --duration");
  if (o.duration_s > 0 && o.mode == "pingpong") {
    return invalidArgument("--duration applies to sendrecv and allreduce");
  }
  if ((o.on_ms > 0 || o.compute_ms != 0) &&
      (o.mode == "sendrecv" || o.mode == "pingpong" || o.duration_s <= 0)) {
    return invalidArgument(
        "--on-off and --compute-ms apply to allreduce, alltoall and incast "
        "with --duration");
  }
  if (o.compute_ms < 0) return invalidArgument("--compute-ms must be >= 0");
  if (o.chunk < 4 || o.chunk > (1ull << 30)) return invalidArgument("--chunk must be 4 B..1 GiB");
  return o;
}

}  // namespace tq::perf
