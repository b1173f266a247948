#include "policy/yaml_doc.h"

#include <yaml.h>

#include <cstring>
#include <unordered_map>

namespace tq::policy::yaml {

namespace {

const std::string kEmpty;

Mark markOf(const yaml_mark_t& m) { return {static_cast<int>(m.line), static_cast<int>(m.column)}; }

// yaml-cpp's (and YAML 1.2 core's) null for a plain scalar.
bool isNullText(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

struct ParserHolder {
  yaml_parser_t parser;
  bool ok;
  ParserHolder() : ok(yaml_parser_initialize(&parser) != 0) {}
  ~ParserHolder() {
    if (ok) yaml_parser_delete(&parser);
  }
  ParserHolder(const ParserHolder&) = delete;
  ParserHolder& operator=(const ParserHolder&) = delete;
};

struct EventHolder {
  yaml_event_t event{};
  ~EventHolder() { yaml_event_delete(&event); }
};

const char* text(const yaml_char_t* s) { return reinterpret_cast<const char*>(s); }

}  // namespace

NodeType Node::type() const { return d_ != nullptr ? d_->type : NodeType::kUndefined; }
const std::string& Node::scalar() const {
  return d_ != nullptr && d_->type == NodeType::kScalar ? d_->scalar : kEmpty;
}
bool Node::quoted() const { return d_ != nullptr && d_->quoted; }
Mark Node::mark() const { return d_ != nullptr ? d_->mark : Mark{}; }
std::span<const Node> Node::items() const {
  if (d_ == nullptr) return {};
  return d_->items;
}
std::span<const std::pair<Node, Node>> Node::pairs() const {
  if (d_ == nullptr) return {};
  return d_->pairs;
}
size_t Node::size() const {
  if (d_ == nullptr) return 0;
  return d_->type == NodeType::kMap ? d_->pairs.size() : d_->items.size();
}

bool Document::parse(std::string_view input) {
  documents.clear();  // a second parse starts afresh (earlier Nodes stay valid: nodes_ keeps them)
  error.clear();
  error_mark = {};
  ParserHolder p;
  if (!p.ok) {
    error = "cannot initialise libyaml's parser (out of memory)";
    error_mark = {0, 0};
    return false;
  }
  yaml_parser_set_input_string(&p.parser, reinterpret_cast<const unsigned char*>(input.data()),
                               input.size());
  struct Open {
    NodeData* node;
    std::string anchor;  // registered when the node ends: an alias inside it is undefined
    bool have_key = false;
    Node key;
  };
  std::vector<Open> open;
  std::unordered_map<std::string, const NodeData*> anchors;  // of the current document
  Node root;
  auto newNode = [&](NodeType type, const yaml_mark_t& at) {
    NodeData& d = nodes_.emplace_back();
    d.type = type;
    d.mark = markOf(at);
    return &d;
  };
  auto anchorName = [](const yaml_char_t* anchor) {
    return anchor != nullptr ? std::string(text(anchor)) : std::string();
  };
  for (;;) {
    EventHolder e;
    if (yaml_parser_parse(&p.parser, &e.event) == 0) {
      // The event is untouched on failure; EventHolder's delete of a zeroed event is a no-op.
      std::memset(&e.event, 0, sizeof e.event);
      error = p.parser.problem != nullptr ? p.parser.problem : "malformed YAML";
      if (p.parser.context != nullptr) error = std::string(p.parser.context) + ": " + error;
      error_mark = markOf(p.parser.problem_mark);
      return false;
    }
    const yaml_event_t& ev = e.event;
    Node done;  // a node this event completes
    switch (ev.type) {
      case YAML_STREAM_END_EVENT: return true;
      case YAML_DOCUMENT_START_EVENT:
        anchors.clear();
        root = Node();
        break;
      case YAML_DOCUMENT_END_EVENT: documents.push_back(root); break;
      case YAML_ALIAS_EVENT: {
        auto it = anchors.find(text(ev.data.alias.anchor));
        if (it == anchors.end()) {
          error = std::string("the referenced anchor \"") + text(ev.data.alias.anchor) +
                  "\" is not defined";
          error_mark = markOf(ev.start_mark);
          return false;
        }
        done = Node(it->second);
        break;
      }
      case YAML_SCALAR_EVENT: {
        const bool plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        const bool tagged = ev.data.scalar.tag != nullptr;
        NodeData* d = newNode(NodeType::kScalar, ev.start_mark);
        if (ev.data.scalar.anchor != nullptr) anchors[text(ev.data.scalar.anchor)] = d;
        d->scalar.assign(text(ev.data.scalar.value), ev.data.scalar.length);
        d->quoted = !plain && !tagged;
        if (plain && !tagged && isNullText(d->scalar)) d->type = NodeType::kNull;
        done = Node(d);
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
        open.push_back({newNode(NodeType::kSequence, ev.start_mark),
                        anchorName(ev.data.sequence_start.anchor)});
        break;
      case YAML_MAPPING_START_EVENT:
        open.push_back(
            {newNode(NodeType::kMap, ev.start_mark), anchorName(ev.data.mapping_start.anchor)});
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        if (open.empty()) break;  // libyaml pairs them; never trust that blindly
        done = Node(open.back().node);
        if (!open.back().anchor.empty()) anchors[open.back().anchor] = open.back().node;
        open.pop_back();
        break;
      default: break;
    }
    if (done.type() == NodeType::kUndefined) continue;
    if (open.empty()) {
      root = done;
      continue;
    }
    Open& top = open.back();
    if (top.node->type == NodeType::kSequence) {
      top.node->items.push_back(done);
    } else if (!top.have_key) {
      top.key = done;
      top.have_key = true;
    } else {
      top.node->pairs.emplace_back(top.key, done);
      top.have_key = false;
    }
  }
}

}  // namespace tq::policy::yaml
