// A YAML document as the policy readers (yaml_reader.h) walk it, built from libyaml's events:
// each node's kind, a scalar's text and whether it was plain (unquoted), and where it starts.
// Nothing else of YAML is kept (no tags beyond that, no styles, no comments).
//
// Why not yaml-cpp's node tree: for a 1000-tenant policy (170 KiB) yaml-cpp took ~45 ms of CPU
// and libyaml's parser ~10 ms on the development machine; the apply path parses every policy, and
// under the allocator's load the parse is the largest part of an apply (docs/cli.md). The
// importers (hypernode_import, volcano_import) still read their documents with yaml-cpp.
//
// YAML as yaml-cpp read it for the policy: a plain scalar "", "~", "null", "Null" or "NULL" is
// an empty value (isNull); an alias is the anchored node itself (shared, never copied, so an
// alias costs nothing whatever it points at); an alias to an unknown anchor is a syntax error.
// A mapping keeps every pair, duplicate keys included (the readers report duplicates).
//
// Bounded input: callers run scanYamlBudget (policy_file.h) first, so the nesting and the node
// count are bounded before this parser allocates anything; the builder itself is iterative (no
// recursion). Positions are 0-based here, as in yaml-cpp's Mark (yaml_reader.h posOf adds 1).
// Thread-safety: a Document and its Nodes are immutable once parsed; Nodes point into their
// Document and must not outlive it.
#pragma once

#include <cstddef>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tq::policy::yaml {

struct Mark {
  int line = -1;  // 0-based; -1: unknown
  int column = -1;
  bool is_null() const { return line < 0; }
};

enum class NodeType { kUndefined, kNull, kScalar, kSequence, kMap };

struct NodeData;

class Node {
 public:
  Node() = default;  // undefined: no node (an Entry without a key)
  explicit Node(const NodeData* d) : d_(d) {}

  NodeType type() const;
  bool isNull() const { return type() == NodeType::kNull; }
  bool isScalar() const { return type() == NodeType::kScalar; }
  bool isSequence() const { return type() == NodeType::kSequence; }
  bool isMap() const { return type() == NodeType::kMap; }
  // A scalar's text ("" for any other node).
  const std::string& scalar() const;
  // Whether a scalar was quoted or a block scalar, without a tag (yaml-cpp's "!" tag): the
  // readers take it for a string, never a number or a boolean.
  bool quoted() const;
  Mark mark() const;
  // A sequence's items, a mapping's pairs (empty for any other node).
  std::span<const Node> items() const;
  std::span<const std::pair<Node, Node>> pairs() const;
  // Items of a sequence, pairs of a mapping, 0 otherwise.
  size_t size() const;

 private:
  const NodeData* d_ = nullptr;
};

struct NodeData {
  NodeType type = NodeType::kUndefined;
  bool quoted = false;
  Mark mark;
  std::string scalar;
  std::vector<Node> items;
  std::vector<std::pair<Node, Node>> pairs;
};

// The documents of a YAML stream. parse() fills `documents` (the root node of each, in order)
// or sets `error` (the parser's problem and context, without a "syntax error" prefix) and
// `error_mark` (where it was noticed), keeping the documents before it. Each parse() replaces
// what the previous one left in `documents` and `error`.
class Document {
 public:
  bool parse(std::string_view text);

  std::vector<Node> documents;
  std::string error;
  Mark error_mark;

 private:
  std::deque<NodeData> nodes_;  // stable addresses: Nodes point here
};

}  // namespace tq::policy::yaml
