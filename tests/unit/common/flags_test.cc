#include "common/flags.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tq {
namespace {

enum class Mode { kA, kB };

struct Config {
  std::string name = "n";
  std::string addr = "127.0.0.1:1";
  std::vector<std::string> replicas;
  int64_t count = 3;
  int small = 1;
  std::chrono::seconds wait{30};
  int64_t period_ns = 10'000'000;
  int64_t expiry_ns = 30'000'000'000;
  uint64_t burst = 256 * 1024;
  LogLevel level = LogLevel::kInfo;
  std::string store = "file";
  Mode mode = Mode::kA;
  bool on = false;
  std::vector<std::string> items;
};

struct Fixture {
  Config c;
  FlagTable t{"prog"};
  Fixture() {
    t.positionals(2);
    t.nonEmpty("--name", "NAME", &c.name, "a name");
    t.hostPort("--addr", &c.addr, "an address");
    t.hostPortList("--replicas", &c.replicas, "replicas");
    t.integer("--count", "N", &c.count, 1, 10, "a count").alias("-c");
    t.integer("--small", "N", &c.small, 0, 5, "an int");
    t.integer("--wait", "SECONDS", &c.wait, 0, 3600, "a wait");
    t.millis("--period-ms", &c.period_ns, 1, 1000, "a period");
    t.seconds("--expiry", &c.expiry_ns, 1, 86400, "an expiry");
    t.size("--burst", &c.burst, 1500, 1 << 20, "a size");
    t.logLevel("--log-level", &c.level, "the level");
    t.choice("--store", &c.store, {"file", "etcd"}, "a store");
    t.choice<Mode>("--mode", &c.mode, {{"a", Mode::kA}, {"b", Mode::kB}}, "a mode");
    t.toggle("--on", &c.on, "a switch");
    t.add("--item", "X", "an item", [this](std::string_view v) {
       c.items.emplace_back(v);
       return okStatus();
     }).repeated();
  }
  Result<FlagTable::Parsed> parse(const std::vector<std::string>& args) { return t.parse(args); }
};

TEST(FlagTableTest, EveryTypeBothSyntaxes) {
  Fixture f;
  auto p = f.parse({"--name",
                    "x",
                    "--addr=[::1]:80",
                    "--replicas",
                    "a:1,b:2",
                    "-c",
                    "7",
                    "--small=5",
                    "--wait",
                    "0",
                    "--period-ms=250",
                    "--expiry",
                    "1.5",
                    "--burst",
                    "1MiB",
                    "--log-level",
                    "debug",
                    "--store=etcd",
                    "--mode",
                    "b",
                    "--on",
                    "--item",
                    "i1",
                    "--item=i2",
                    "pos1",
                    "--",
                    "--pos2"});
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(f.c.name, "x");
  EXPECT_EQ(f.c.addr, "[::1]:80");
  EXPECT_EQ(f.c.replicas, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(f.c.count, 7);
  EXPECT_EQ(f.c.small, 5);
  EXPECT_EQ(f.c.wait, std::chrono::seconds(0));
  EXPECT_EQ(f.c.period_ns, 250'000'000);
  EXPECT_EQ(f.c.expiry_ns, 1'500'000'000);
  EXPECT_EQ(f.c.burst, 1u << 20);
  EXPECT_EQ(f.c.level, LogLevel::kDebug);
  EXPECT_EQ(f.c.store, "etcd");
  EXPECT_EQ(f.c.mode, Mode::kB);
  EXPECT_TRUE(f.c.on);
  EXPECT_EQ(f.c.items, (std::vector<std::string>{"i1", "i2"}));
  EXPECT_EQ(p->positional, (std::vector<std::string>{"pos1", "--pos2"}));
  EXPECT_TRUE(p->has("--count"));
  EXPECT_FALSE(p->has("--addr2"));
  EXPECT_FALSE(p->help);
}

TEST(FlagTableTest, ErrorsNameTheFlagAndTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--name="}, "--name: empty value"},
      {{"--name"}, "--name needs a value NAME"},
      {{"--addr", "nohost"}, "--addr: \"nohost\" is not HOST:PORT"},
      {{"--replicas", "a:1,,b:2"}, "--replicas: "},
      {{"--replicas", "a:1,b"}, "\"b\" is not HOST:PORT"},
      {{"--count", "11"}, "--count: 11 is outside [1, 10]"},
      {{"--count", "1x"}, "--count: \"1x\" is not a whole number"},
      {{"--wait", "-1"}, "--wait: -1 is outside [0, 3600]"},
      {{"--period-ms", "0"}, "--period-ms: 0 is outside [1, 1000]"},
      {{"--expiry", "0.5"}, "--expiry: 0.5 s is outside [1, 86400]"},
      {{"--expiry", "nan"}, "--expiry: \"nan\" is not a number of seconds"},
      {{"--burst", "100B"}, "--burst: 100B is outside [1500B, 1MiB]"},
      {{"--burst", "lots"}, "--burst: "},
      {{"--log-level", "loud"}, "--log-level: "},
      {{"--store", "disk"}, "--store: \"disk\" is not file or etcd"},
      {{"--mode", "c"}, "--mode: \"c\" is not a or b"},
      {{"--on=yes"}, "--on takes no value"},
      {{"--count", "1", "--count", "2"}, "--count given twice"},
      {{"--frob"}, "unknown flag \"--frob\""},
      {{"--frob=1"}, "unknown flag \"--frob=1\""},
      {{"-x"}, "unknown flag \"-x\""},
      {{"a", "b", "c"}, "unexpected argument \"c\""},
  };
  for (const auto& [args, want] : cases) {
    Fixture f;
    auto p = f.parse(args);
    ASSERT_FALSE(p.ok()) << want;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(want), std::string::npos)
        << p.status().message() << " (wanted: " << want << ")";
  }
}

TEST(FlagTableTest, HelpStopsParsing) {
  Fixture f;
  auto p = f.parse({"--count", "2", "-h", "--frob"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->help);
  EXPECT_EQ(f.c.count, 2);
}

TEST(FlagTableTest, RequiredFlags) {
  Config c;
  FlagTable t("prog");
  t.nonEmpty("--must", "X", &c.name, "needed").mandatory();
  auto p = t.parse(std::vector<std::string>{});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "--must X is required");
  EXPECT_TRUE(t.parse({"--must", "y"}).ok());
  // --help needs nothing else.
  EXPECT_TRUE(t.parse({"--help"}).ok());
}

TEST(FlagTableTest, DefaultsComeFromTheFields) {
  Fixture f;
  const std::string usage = f.t.usage();
  // The meaning starts at column 28.
  EXPECT_NE(usage.find("  --addr HOST:PORT" + std::string(10, ' ') +
                       "an address (default 127.0.0.1:1)\n"),
            std::string::npos)
      << usage;
  EXPECT_NE(usage.find("  -c, --count N" + std::string(13, ' ') + "a count (1..10; default 3)\n"),
            std::string::npos)
      << usage;
  EXPECT_NE(usage.find("(0..3600; default 30)"), std::string::npos) << usage;   // --wait
  EXPECT_NE(usage.find("(1..1000; default 10)"), std::string::npos) << usage;   // --period-ms
  EXPECT_NE(usage.find("(1..86400; default 30)"), std::string::npos) << usage;  // --expiry
  EXPECT_NE(usage.find("(1500B..1MiB; default 256KiB)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("the level (default info)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--mode a|b"), std::string::npos) << usage;
  EXPECT_NE(usage.find("  -h, --help"), std::string::npos) << usage;
}

TEST(FlagTableTest, UsageWrapsLongHelp) {
  std::string s;
  FlagTable t("prog");
  t.text("--a-rather-long-flag-name", "VALUE", &s, std::string(150, 'x') + " " + "word " + "end");
  const std::string usage = t.usage(60);
  // The long name gets a line of its own; the help starts at column 28 on the next.
  EXPECT_EQ(usage.rfind("  --a-rather-long-flag-name VALUE\n" + std::string(28, ' ') + "x", 0), 0u)
      << usage;
  for (size_t pos = 0, end; (end = usage.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = usage.substr(pos, end - pos);
    if (line.find("word") != std::string::npos) {
      EXPECT_LE(line.size(), 60u) << line;
    }
  }
}

TEST(FlagTableTest, MarkdownTable) {
  Fixture f;
  f.t.add("--hidden", "X", "not listed", [](std::string_view) { return okStatus(); }).hide();
  f.t.nonEmpty("--node", "NAME", &f.c.name, "a node").defaultText("the host name");
  const std::string md = f.t.markdown();
  EXPECT_EQ(md.rfind("| Flag | Default | Meaning |\n|---|---|---|\n", 0), 0u) << md;
  EXPECT_NE(md.find("| `--addr HOST:PORT` | `127.0.0.1:1` | an address |\n"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| `-c`, `--count N` | `3` | a count (1..10) |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--store file\\|etcd` | `file` | a store |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--on` | off | a switch |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--replicas HOST:PORT[,HOST:PORT...]` | none | replicas |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `--node NAME` | the host name | a node |\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("--hidden"), std::string::npos) << md;
  EXPECT_NE(md.find("| `-h`, `--help` | | this help |\n"), std::string::npos) << md;
}

TEST(FlagTableTest, FlagDocsUseTheConfigsDefaults) {
  struct Cfg {
    int64_t n = 42;
  };
  const FlagDocs docs = flagDocs<Cfg>(
      "prog", [](FlagTable& t, Cfg* c) { t.integer("--n", "N", &c->n, 0, 100, "a number"); });
  EXPECT_NE(docs.usage.find("a number (0..100; default 42)"), std::string::npos) << docs.usage;
  EXPECT_NE(docs.markdown.find("| `--n N` | `42` | a number (0..100) |"), std::string::npos)
      << docs.markdown;
}

TEST(FlagTableTest, GeneratedBlock) {
  const std::string doc = "a\n<!-- BEGIN generated by T -->\n| x |\n<!-- END generated -->\nb\n";
  auto b = generatedBlock(doc, "T");
  ASSERT_TRUE(b.ok()) << b.status().toString();
  EXPECT_EQ(*b, "| x |\n");
  EXPECT_EQ(generatedBlock(doc, "U").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(generatedBlock("<!-- BEGIN generated by T -->\n| x |\n", "T").ok());
}

TEST(FlagTableTest, UsageErrorText) {
  EXPECT_EQ(usageErrorText("prog", invalidArgument("--x: bad")),
            "prog: --x: bad\n(see prog --help)\n");
}

}  // namespace
}  // namespace tq
