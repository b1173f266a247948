#include "common/text.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(TextTest, EscapeControlMakesForgedRowsAndColoursInert) {
  // The forged history row: a newline and ANSI colour in a client string.
  EXPECT_EQ(escapeControl("ceo\n9 2099-01-01 \x1b[31msecurity@corp"),
            "ceo\\x0a9 2099-01-01 \\x1b[31msecurity@corp");
  EXPECT_EQ(escapeControl("a\tb\r\x7f"), "a\\x09b\\x0d\\x7f");
  EXPECT_EQ(escapeControl("csi \xc2\x9b"
                          "31m"),
            "csi \\u009b31m");                                                       // C1 in UTF-8
  EXPECT_EQ(escapeControl("gr\xc3\xbc\xc3\x9f plain"), "gr\xc3\xbc\xc3\x9f plain");  // UTF-8 kept
  EXPECT_EQ(escapeControl("line1\nline2\x1b", true), "line1\nline2\\x1b");
}

TEST(TextTest, HttpReasonPhrases) {
  EXPECT_STREQ(httpReasonPhrase(200), "OK");
  EXPECT_STREQ(httpReasonPhrase(413), "Payload Too Large");
  EXPECT_STREQ(httpReasonPhrase(431), "Request Header Fields Too Large");
  EXPECT_STREQ(httpReasonPhrase(503), "Service Unavailable");
  EXPECT_STREQ(httpReasonPhrase(418), "Status");  // any code it does not name
}

TEST(TextTest, JsonQuoteEscapesEverythingThatCouldBreakALine) {
  EXPECT_EQ(jsonQuote("a\"b\\c\nd\x01\x7f"), "\"a\\\"b\\\\c\\nd\\u0001\\u007f\"");
}

}  // namespace
}  // namespace tq
