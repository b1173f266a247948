#include "common/units.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

struct Good {
  const char* text;
  uint64_t bytes_per_second;
};

TEST(ParseRate, GoodInputs) {
  const Good kCases[] = {
      {"40Gbps", 5'000'000'000},
      {"100Mbit", 12'500'000},
      {"1.5Gbps", 187'500'000},
      {"500Mbps", 62'500'000},
      {"125MB/s", 125'000'000},
      {"1000000", 125'000},
      {"8", 1},
      {"0", 0},
      {"0Gbps", 0},
      {"100gbps", 12'500'000'000},
      {"10 Gbit", 1'250'000'000},
      {"  1Tbps ", 125'000'000'000},
      {"1kbps", 125},
      {"1Kbps", 125},
      {"2.5GB/s", 2'500'000'000},
      {"10kB/s", 10'000},
      {"1B/s", 1},
      {"0.001Gbps", 125'000},
      {"12bps", 2},  // 1.5 bytes rounds to nearest
      {"+1Mbps", 125'000},
      {"007Mbps", 875'000},
  };
  for (const Good& c : kCases) {
    auto r = parseRate(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().toString();
    EXPECT_EQ(*r, c.bytes_per_second) << c.text;
  }
}

TEST(ParseRate, BadInputs) {
  const char* kCases[][2] = {
      {"", "empty"},
      {"-1Gbps", "must not be negative"},
      {"10Xbps", "unknown unit \"Xbps\""},
      {"10mb/s", "unknown unit \"mb/s\""},  // byte forms are case-sensitive
      {"Gbps", "expected a number"},
      {"1.2.3Gbps", "unknown unit"},
      {"1_000", "digit separators"},
      {"999999999999999999999Tbps", "too large"},
      {"1e9", "unknown unit \"e9\""},
      {"1,5Gbps", "digit separators"},
  };
  for (auto& c : kCases) {
    auto r = parseRate(c[0]);
    ASSERT_FALSE(r.ok()) << c[0];
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c[1]), std::string::npos)
        << c[0] << " -> " << r.status().message();
  }
}

TEST(ParseRate, MaxValueFitsAndOneMoreOverflows) {
  EXPECT_TRUE(parseRate("18446744073709551615B/s").ok());
  EXPECT_FALSE(parseRate("18446744073709551616B/s").ok());
}

TEST(ParseSize, GoodAndBad) {
  EXPECT_EQ(*parseSize("256KiB"), 262144u);
  EXPECT_EQ(*parseSize("4MiB"), 4u << 20);
  EXPECT_EQ(*parseSize("64KB"), 64000u);
  EXPECT_EQ(*parseSize("1MB"), 1000000u);
  EXPECT_EQ(*parseSize("4096"), 4096u);
  EXPECT_EQ(*parseSize("1.5KiB"), 1536u);
  EXPECT_FALSE(parseSize("-4KiB").ok());
  EXPECT_FALSE(parseSize("4Kib").ok());
  EXPECT_FALSE(parseSize("4 parsecs").ok());
}

TEST(ParsePercent, GoodAndBad) {
  EXPECT_DOUBLE_EQ(*parsePercent("5%"), 5.0);
  EXPECT_DOUBLE_EQ(*parsePercent("12.5"), 12.5);
  EXPECT_DOUBLE_EQ(*parsePercent("0 %"), 0.0);
  EXPECT_FALSE(parsePercent("-1%").ok());
  EXPECT_FALSE(parsePercent("101%").ok());
  EXPECT_FALSE(parsePercent("five").ok());
  EXPECT_FALSE(parsePercent("5%%").ok());
}

TEST(FormatRate, RoundTrips) {
  EXPECT_EQ(formatRate(5'000'000'000), "40Gbps");
  EXPECT_EQ(formatRate(187'500'000), "1.5Gbps");
  EXPECT_EQ(formatRate(12'500'000), "100Mbps");
  EXPECT_EQ(formatRate(0), "0bps");
  EXPECT_EQ(formatRate(125), "1Kbps");
  for (uint64_t v : {1ull, 125ull, 62'500'000ull, 5'000'000'000ull, 12'345'000'000ull}) {
    EXPECT_EQ(*parseRate(formatRate(v)), v) << formatRate(v);
  }
}

TEST(FormatSize, Binary) {
  EXPECT_EQ(formatSize(262144), "256KiB");
  EXPECT_EQ(formatSize(1000), "1000B");
  EXPECT_EQ(formatSize(3u << 20), "3MiB");
}

}  // namespace
}  // namespace tq
