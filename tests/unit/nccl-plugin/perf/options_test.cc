// tenantqos-perf's command line (nccl-plugin/perf/options.cc): the flag table, the mode and the
// cross-flag rules, and the docs table it writes.
#include "nccl-plugin/perf/options.h"

#include <gtest/gtest.h>

#include "tests/support/docs_table.h"

namespace tq::perf {
namespace {

Result<Options> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tenantqos-perf");
  return parseArgs(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

TEST(PerfOptionsTest, ModesAndDefaults) {
  auto o = parse({"sendrecv", "--local", "2"});
  ASSERT_TRUE(o.ok()) << o.status().toString();
  EXPECT_EQ(o->mode, "sendrecv");
  EXPECT_EQ(o->nranks, 2);
  EXPECT_EQ(o->poll, PollMode::kSleep);
  EXPECT_EQ(o->max_bytes, 64ull << 20);
  for (const char* mode : {"alltoall", "incast"}) {
    o = parse({mode, "--local", "3", "--duration", "1", "--on-off", "5:5", "--compute-ms", "1"});
    ASSERT_TRUE(o.ok()) << mode << ": " << o.status().toString();
    EXPECT_EQ(o->mode, mode);
  }
  o = parse({"--local", "2", "pingpong"});  // the mode may come anywhere
  ASSERT_TRUE(o.ok()) << o.status().toString();
  EXPECT_EQ(o->poll, PollMode::kSpin);
  EXPECT_EQ(o->max_bytes, 64u << 10);
}

TEST(PerfOptionsTest, EveryFlag) {
  auto o = parse({"allreduce",
                  "--rank",
                  "1",
                  "--nranks",
                  "4",
                  "--rendezvous",
                  "10.0.0.1:5000",
                  "--plugin",
                  "/p.so",
                  "--abi",
                  "10",
                  "--dev",
                  "1",
                  "--trafficclass",
                  "3",
                  "--tenant",
                  "a",
                  "--env",
                  "X=1",
                  "--env",
                  "Y=2",
                  "--rank-env",
                  "1:Z=3",
                  "-b",
                  "1K",
                  "-e",
                  "2M",
                  "-f",
                  "4",
                  "-n",
                  "7",
                  "-w",
                  "2",
                  "--window",
                  "24",
                  "--duration",
                  "1.5",
                  "--size",
                  "8M",
                  "--chunk",
                  "128K",
                  "--on-off",
                  "100:50:10",
                  "--compute-ms",
                  "5",
                  "--report-interval",
                  "200",
                  "--check-all",
                  "--timeout",
                  "9",
                  "--json",
                  "--poll",
                  "yield"});
  ASSERT_TRUE(o.ok()) << o.status().toString();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->nranks, 4);
  EXPECT_EQ(o->rendezvous, "10.0.0.1:5000");
  EXPECT_EQ(o->plugin, "/p.so");
  EXPECT_EQ(o->abi, 10);
  EXPECT_EQ(o->dev, 1);
  EXPECT_EQ(o->traffic_class, 3);
  EXPECT_EQ(o->env, (std::vector<std::string>{"TENANTQOS_TENANT=a", "X=1", "Y=2"}));
  ASSERT_EQ(o->rank_env.size(), 1u);
  EXPECT_EQ(o->rank_env[0], (std::pair<int, std::string>{1, "Z=3"}));
  EXPECT_EQ(o->min_bytes, 1024u);
  EXPECT_EQ(o->max_bytes, 2u << 20);
  EXPECT_EQ(o->step_factor, 4u);
  EXPECT_EQ(o->iters, 7);
  EXPECT_EQ(o->warmup, 2);
  EXPECT_EQ(o->window, 24);
  EXPECT_DOUBLE_EQ(o->duration_s, 1.5);
  EXPECT_EQ(o->size, 8u << 20);
  EXPECT_EQ(o->chunk, 128u << 10);
  EXPECT_EQ(o->on_ms, 100);
  EXPECT_EQ(o->off_ms, 50);
  EXPECT_EQ(o->phase_ms, 10);
  EXPECT_EQ(o->compute_ms, 5);
  EXPECT_EQ(o->report_ms, 200);
  EXPECT_TRUE(o->check_all);
  EXPECT_DOUBLE_EQ(o->timeout_s, 9);
  EXPECT_TRUE(o->json);
  EXPECT_EQ(o->poll, PollMode::kYield);
}

TEST(PerfOptionsTest, UsageErrors) {
  const std::vector<std::pair<std::vector<const char*>, std::string>> cases = {
      {{}, "missing mode"},
      {{"bcast", "--local", "2"}, "unknown mode \"bcast\""},
      {{"sendrecv", "allreduce", "--local", "2"}, "unexpected argument \"allreduce\""},
      {{"sendrecv"}, "give --local N, or --rank R --nranks N --rendezvous HOST:PORT"},
      {{"sendrecv", "--local", "2", "--rank", "0"}, "--local excludes --rank/--rendezvous"},
      {{"sendrecv", "--local", "2", "--window", "33"}, "--window: 33 is outside [1, 32]"},
      {{"sendrecv", "--local", "2", "--rendezvous", "nohost"}, "--rendezvous: "},
      {{"pingpong", "--local", "3"}, "pingpong needs exactly 2 ranks"},
      {{"allreduce", "--local", "2", "--duration", "1", "--on-off", "0:5"}, "ON_MS > 0"},
      {{"sendrecv", "--local", "2", "--compute-ms", "5"},
       "apply to allreduce, alltoall and incast with --duration"},
      {{"incast", "--local", "1"}, "incast needs at least 2 ranks"},
      {{"alltoall", "--local", "3", "--on-off", "5:5"}, "with --duration"},
      {{"sendrecv", "--local", "2", "--rank-env", "x:A=1"}, "expected R:NAME=VALUE"},
      {{"sendrecv", "--local", "2", "--env", "NOEQUALS"}, "expected NAME=VALUE"},
      {{"sendrecv", "--local", "2", "--poll", "busy"},
       "--poll: \"busy\" is not spin, yield or sleep"},
      {{"sendrecv", "--local", "2", "--timeout", "-1"}, "--timeout: -1: not a number >= 0"},
      {{"sendrecv", "--local", "2", "-b", "2M", "-e", "1M"}, "--minbytes above --maxbytes"},
  };
  for (const auto& [args, want] : cases) {
    auto o = parse(args);
    ASSERT_FALSE(o.ok()) << want;
    EXPECT_NE(o.status().message().find(want), std::string::npos)
        << o.status().message() << " (wanted: " << want << ")";
  }
}

TEST(PerfOptionsTest, HelpAndDocsFromTheTable) {
  auto o = parse({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
  EXPECT_NE(usage().find("-b, --minbytes SIZE"), std::string::npos) << usage();
  EXPECT_EQ(testing::docsBlockMismatch("docs/plugin.md", "addPerfFlags", flagsMarkdown()), "");
}

}  // namespace
}  // namespace tq::perf
