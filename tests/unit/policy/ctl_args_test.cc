// tenantqosctl's command line: the table of commands, the global flags, the environment.
#include "policy/ctl_args.h"

#include <gtest/gtest.h>

#include <sstream>

namespace tq::policy::ctl {
namespace {

Args parsed(const std::vector<std::string>& args, std::string* problem) {
  Args a;
  *problem = parseArgs(args, &a);
  return a;
}

TEST(CtlArgsTest, GlobalFlagsBeforeOrAfterTheCommandAndInlineValues) {
  std::string problem;
  Args a =
      parsed({"--server", "a:1,b:2", "--timeout=2.5", "get", "-o", "json", "--insecure"}, &problem);
  ASSERT_EQ(problem, "");
  EXPECT_EQ(a.server, "a:1,b:2");
  EXPECT_EQ(a.server_from, "--server");
  EXPECT_DOUBLE_EQ(a.timeout_s, 2.5);
  EXPECT_TRUE(a.tls.insecure);
  ASSERT_NE(a.cmd, nullptr);
  EXPECT_STREQ(a.cmd->name, "get");
  EXPECT_EQ(a.values.at("--output"), "json") << "-o is stored under its long name";

  a = parsed({"apply", "-f", "p.yaml", "--dry-run", "--expected-version=3", "--tls-ca", "ca.pem"},
             &problem);
  ASSERT_EQ(problem, "");
  EXPECT_EQ(a.values.at("--filename"), "p.yaml");
  EXPECT_EQ(a.values.at("--expected-version"), "3");
  EXPECT_TRUE(a.bools.count("--dry-run"));
  EXPECT_EQ(a.tls.ca_file, "ca.pem");

  a = parsed({"rollback", "4"}, &problem);
  ASSERT_EQ(problem, "");
  EXPECT_EQ(a.positional, std::vector<std::string>{"4"});
}

TEST(CtlArgsTest, ProblemsNameTheFlagOrCommand) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{}, "no command given"},
      {{"frobnicate"}, "unknown command \"frobnicate\""},
      {{"--dry-run", "apply"}, "unknown flag --dry-run (flags of a command go after it)"},
      {{"get", "--dry-run"}, "unknown flag --dry-run for get"},
      {{"apply", "--dry-run=yes"}, "unknown flag --dry-run for apply"},
      {{"get", "--server"}, "--server needs HOST:PORT"},
      {{"get", "--insecure=1"}, "--insecure takes no value"},
      {{"get", "--tls-cert="}, "--tls-cert needs a FILE"},
      {{"get", "--timeout", "0"}, "--timeout needs a number of seconds in (0, 3600]"},
      {{"get", "--timeout", "3601"}, "--timeout needs a number of seconds in (0, 3600]"},
      {{"get", "--timeout", "1s"}, "--timeout needs a number of seconds in (0, 3600]"},
      {{"apply", "-f"}, "-f needs a value"},
      {{"rollback"}, "wrong number of arguments for rollback"},
      {{"history", "extra"}, "wrong number of arguments for history"},
  };
  for (const auto& [args, want] : cases) {
    std::string problem;
    parsed(args, &problem);
    EXPECT_EQ(problem, want) << ::testing::PrintToString(args);
  }
}

TEST(CtlArgsTest, HelpWinsOverEverythingElse) {
  std::string problem;
  Args a = parsed({"--help"}, &problem);
  EXPECT_EQ(problem, "");
  EXPECT_TRUE(a.help);
  EXPECT_EQ(a.cmd, nullptr);
  a = parsed({"render", "-h"}, &problem);
  EXPECT_EQ(problem, "") << "render's argument count is not checked for --help";
  EXPECT_TRUE(a.help);
  EXPECT_STREQ(a.cmd->name, "render");
  a = parsed({"help"}, &problem);
  EXPECT_TRUE(a.help);
}

TEST(CtlArgsTest, EveryCommandHasItsHelpAndIsInTheMainHelp) {
  for (const CommandSpec& c : commands()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(std::string(c.help).rfind(std::string("Usage: tenantqosctl ") + c.name, 0), 0u);
    EXPECT_EQ(findCommand(c.name), &c);
    EXPECT_NE(std::string(mainHelp()).find("\n  " + std::string(c.name) + " "), std::string::npos);
    EXPECT_LE(c.min_args, c.max_args);
  }
  EXPECT_EQ(findCommand("nope"), nullptr);
}

TEST(CtlArgsTest, TheEnvironmentFillsWhatTheFlagsLeftUnset) {
  std::ostringstream out, err;
  std::istringstream in;
  std::map<std::string, std::string> env = {{"TENANTQOS_SERVER", "env:1"},
                                            {"TENANTQOS_TLS_CA", "env-ca"},
                                            {"TENANTQOS_TLS_CERT", "env-cert"},
                                            {"TENANTQOS_TLS_KEY", "env-key"},
                                            {"TENANTQOS_INSECURE", "1"}};
  CtlContext ctx{out, err, in, [&env](const std::string& n) { return env[n]; }};
  Args a;
  a.tls.ca_file = "flag-ca";
  applyEnvironment(ctx, &a);
  EXPECT_EQ(a.server, "env:1");
  EXPECT_EQ(a.server_from, "$TENANTQOS_SERVER");
  EXPECT_EQ(a.tls.ca_file, "flag-ca") << "a flag wins over its variable";
  EXPECT_EQ(a.tls.cert_file, "env-cert");
  EXPECT_EQ(a.tls.key_file, "env-key");
  EXPECT_TRUE(a.tls.insecure);

  env.clear();
  Args b;
  applyEnvironment(ctx, &b);
  EXPECT_EQ(b.server, kDefaultServer);
  EXPECT_FALSE(b.tls.insecure);
  Args c;
  c.server = "flag:2";
  env["TENANTQOS_SERVER"] = "env:1";
  applyEnvironment(ctx, &c);
  EXPECT_EQ(c.server, "flag:2");
  EXPECT_EQ(c.server_from, "--server");
}

TEST(CtlArgsTest, ParseU64TakesTheWholeTextOnly) {
  EXPECT_EQ(parseU64("42"), 42u);
  EXPECT_EQ(parseU64("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "-1", "4x", " 4", "18446744073709551616", "0x10"}) {
    EXPECT_EQ(parseU64(bad), std::nullopt) << bad;
  }
}

TEST(CtlArgsTest, UsageErrorPrintsTheMessageAndTheCommandsHelp) {
  std::ostringstream out, err;
  std::istringstream in;
  CtlContext ctx{out, err, in, [](const std::string&) { return std::string(); }};
  Args a;
  a.cmd = findCommand("apply");
  EXPECT_EQ(usageError(a, ctx, "apply needs -f FILE"), kExitUsage);
  EXPECT_EQ(err.str(), std::string("tenantqosctl: apply needs -f FILE\n") + a.cmd->help);
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace tq::policy::ctl
