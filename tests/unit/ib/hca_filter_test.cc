#include "ib/hca_filter.h"

#include <gtest/gtest.h>

namespace tq::ib {
namespace {

HcaFilter parse(const char* spec) {
  auto r = parseHcaFilter(spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << r.status().toString();
  return r.ok() ? *r : HcaFilter{};
}

TEST(HcaFilterTest, EmptyMatchesEverything) {
  HcaFilter f = parse("");
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_TRUE(f.matches("rxe1", 2));
}

TEST(HcaFilterTest, PrefixMatchByDefault) {
  HcaFilter f = parse("mlx5_1");
  EXPECT_TRUE(f.matches("mlx5_1", 1));
  EXPECT_TRUE(f.matches("mlx5_10", 1));  // NCCL semantics: prefix
  EXPECT_FALSE(f.matches("mlx5_0", 1));
}

TEST(HcaFilterTest, ExactAndPorts) {
  HcaFilter f = parse("=mlx5_1:2, rxe0");
  EXPECT_TRUE(f.exact);
  EXPECT_TRUE(f.matches("mlx5_1", 2));
  EXPECT_FALSE(f.matches("mlx5_1", 1));
  EXPECT_FALSE(f.matches("mlx5_10", 2));
  EXPECT_TRUE(f.matches("rxe0", 1));
  EXPECT_FALSE(f.matches("rxe01", 1));
  EXPECT_EQ(f.toString(), "=mlx5_1:2,rxe0");
}

TEST(HcaFilterTest, Exclude) {
  HcaFilter f = parse("^mlx5_2");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.matches("mlx5_0", 1));
  EXPECT_FALSE(f.matches("mlx5_2", 1));
  HcaFilter g = parse("^=rxe0:1");
  EXPECT_FALSE(g.matches("rxe0", 1));
  EXPECT_TRUE(g.matches("rxe0", 2));
  EXPECT_TRUE(g.matches("rxe1", 1));
  EXPECT_EQ(g.toString(), "^=rxe0:1");
}

TEST(HcaFilterTest, RejectsBadSpecs) {
  for (const char* bad :
       {"^", "=", "mlx5_0:", "mlx5_0:0", "mlx5_0:x", "mlx5_0:300", ",mlx5_0", "mlx5_0,,rxe0"}) {
    auto r = parseHcaFilter(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("HCA filter"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tq::ib
