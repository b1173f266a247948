// policy/yaml_doc.h: the document tree the policy readers walk (libyaml's events).
#include "policy/yaml_doc.h"

#include <gtest/gtest.h>

#include <string>

namespace tq::policy::yaml {
namespace {

Node parseOne(Document& d, const std::string& text) {
  EXPECT_TRUE(d.parse(text)) << d.error;
  EXPECT_EQ(d.documents.size(), 1u);
  return d.documents.empty() ? Node() : d.documents[0];
}

TEST(YamlDoc, KindsTextAndPositions) {
  Document d;
  Node root = parseOne(d, "a: 1\nb:\n  - x\n  - [y, z]\nc: {k: v}\n");
  ASSERT_TRUE(root.isMap());
  EXPECT_EQ(root.mark().line, 0);
  EXPECT_EQ(root.mark().column, 0);
  ASSERT_EQ(root.size(), 3u);
  const auto& p = root.pairs();
  EXPECT_EQ(p[0].first.scalar(), "a");
  EXPECT_TRUE(p[0].second.isScalar());
  EXPECT_EQ(p[0].second.scalar(), "1");
  EXPECT_EQ(p[0].second.mark().column, 3);
  ASSERT_TRUE(p[1].second.isSequence());
  EXPECT_EQ(p[1].second.mark().line, 2);  // at the first "-"
  EXPECT_EQ(p[1].second.mark().column, 2);
  ASSERT_EQ(p[1].second.items().size(), 2u);
  EXPECT_EQ(p[1].second.items()[0].scalar(), "x");
  EXPECT_TRUE(p[1].second.items()[1].isSequence());
  EXPECT_EQ(p[1].second.items()[1].mark().column, 4);  // at "["
  EXPECT_TRUE(p[2].second.isMap());
  // Other kinds answer empty, never fail.
  EXPECT_EQ(p[2].second.scalar(), "");
  EXPECT_TRUE(p[0].second.items().empty());
  EXPECT_TRUE(p[0].second.pairs().empty());
  EXPECT_EQ(Node().type(), NodeType::kUndefined);
  EXPECT_TRUE(Node().mark().is_null());
}

TEST(YamlDoc, NullsAndQuotedScalars) {
  Document d;
  Node root = parseOne(d,
                       "a:\nb: ~\nc: null\nd: NULL\ne: \"\"\nf: 'null'\ng: \"2\"\nh: 2\n"
                       "i: !!str 2\nj: |\n  text\n");
  ASSERT_EQ(root.size(), 10u);
  const auto& p = root.pairs();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(p[i].second.isNull()) << p[i].first.scalar();
  EXPECT_TRUE(p[4].second.isScalar());  // a quoted empty string is a string
  EXPECT_TRUE(p[4].second.quoted());
  EXPECT_TRUE(p[5].second.isScalar());
  EXPECT_EQ(p[5].second.scalar(), "null");
  EXPECT_TRUE(p[6].second.quoted());
  EXPECT_FALSE(p[7].second.quoted());
  EXPECT_FALSE(p[8].second.quoted());  // tagged: not yaml-cpp's "!"
  EXPECT_TRUE(p[9].second.quoted());   // a block scalar
  EXPECT_EQ(p[9].second.scalar(), "text\n");
}

TEST(YamlDoc, DuplicateKeysAreKept) {
  Document d;
  Node root = parseOne(d, "k: 1\nk: 2\n");
  ASSERT_EQ(root.size(), 2u);
  EXPECT_EQ(root.pairs()[1].first.mark().line, 1);
  EXPECT_EQ(root.pairs()[1].second.scalar(), "2");
}

TEST(YamlDoc, AliasesShareTheAnchoredNode) {
  Document d;
  Node root = parseOne(d, "a: &x {k: v}\nb: *x\nc: &s 5\nd: *s\n");
  const auto& p = root.pairs();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_TRUE(p[1].second.isMap());
  EXPECT_EQ(p[1].second.pairs().data(), p[0].second.pairs().data());  // the same node
  EXPECT_EQ(p[3].second.scalar(), "5");
  // A thousand aliases of one big node cost nothing more than the aliases.
  std::string many = "big: &b [";
  for (int i = 0; i < 1000; ++i) many += "x, ";
  many += "x]\nuse: [";
  for (int i = 0; i < 1000; ++i) many += "*b, ";
  many += "*b]\n";
  Document big;
  Node r = parseOne(big, many);
  EXPECT_EQ(r.pairs()[1].second.items().size(), 1001u);
  EXPECT_EQ(r.pairs()[1].second.items()[1000].items().size(), 1001u);
}

TEST(YamlDoc, UndefinedAndSelfReferencingAliasesAreErrors) {
  Document d;
  EXPECT_FALSE(d.parse("a: 1\nb: *nope\n"));
  EXPECT_EQ(d.error, "the referenced anchor \"nope\" is not defined");
  EXPECT_EQ(d.error_mark.line, 1);
  EXPECT_EQ(d.error_mark.column, 3);
  Document s;
  EXPECT_FALSE(s.parse("a: &x [1, *x]\n"));  // a node is its anchor's only once it ends
  EXPECT_NE(s.error.find("\"x\" is not defined"), std::string::npos) << s.error;
  Document other;  // anchors are per document
  EXPECT_FALSE(other.parse("a: &x 1\n---\nb: *x\n"));
  EXPECT_EQ(other.documents.size(), 1u);
}

TEST(YamlDoc, SyntaxErrorsSayWhatAndWhere) {
  Document d;
  EXPECT_FALSE(d.parse("a: [1, 2\nb: 3\n"));
  EXPECT_NE(d.error.find("flow sequence"), std::string::npos) << d.error;
  EXPECT_EQ(d.error_mark.line, 1);
  Document t;
  EXPECT_FALSE(t.parse("a:\n\tb: 1\n"));  // a tab indents nothing in YAML
  EXPECT_FALSE(t.error.empty());
  EXPECT_GE(t.error_mark.line, 0);
}

TEST(YamlDoc, DocumentsAndEmptyStreams) {
  Document empty;
  EXPECT_TRUE(empty.parse(""));
  EXPECT_TRUE(empty.documents.empty());
  Document comment;
  EXPECT_TRUE(comment.parse("# nothing\n"));
  EXPECT_TRUE(comment.documents.empty());
  Document bare;
  EXPECT_TRUE(bare.parse("---\n"));
  ASSERT_EQ(bare.documents.size(), 1u);
  EXPECT_TRUE(bare.documents[0].isNull());
  Document two;
  EXPECT_TRUE(two.parse("a: 1\n---\nb: 2\n"));
  ASSERT_EQ(two.documents.size(), 2u);
  EXPECT_EQ(two.documents[1].mark().line, 2);
}

TEST(YamlDoc, ASecondParseReplacesTheFirst) {
  Document d;
  EXPECT_FALSE(d.parse("a: *nope\n"));
  EXPECT_TRUE(d.parse("a: 1\n---\nb: 2\n")) << d.error;
  EXPECT_TRUE(d.error.empty());
  EXPECT_EQ(d.documents.size(), 2u);
  EXPECT_TRUE(d.parse("c: 3\n"));
  ASSERT_EQ(d.documents.size(), 1u);
  EXPECT_EQ(d.documents[0].pairs()[0].first.scalar(), "c");
}

TEST(YamlDoc, BinaryGarbageIsAnErrorNotACrash) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>((i * 7919) & 0xff);
  Document d;
  EXPECT_FALSE(d.parse(junk));
  EXPECT_FALSE(d.error.empty());
  Document nul;
  EXPECT_FALSE(nul.parse(std::string("a: \0b\n", 6)));
}

}  // namespace
}  // namespace tq::policy::yaml
