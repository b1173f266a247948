// Text that crosses a trust boundary into a terminal or a JSON document: strings another party
// chose (a node name, an identity, an error message) must not be able to move the cursor, change
// colours or forge lines.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tq {

// `s` with every control character (C0, DEL, and C1 in UTF-8 form) written as "\xNN" (C1 as
// "\u00NN"), so it prints as one inert line. `keep_newlines` leaves '\n' alone (multi-line
// messages).
std::string escapeControl(std::string_view s, bool keep_newlines = false);

// `s` as a JSON string literal, quotes included (control characters as \uNNNN).
std::string jsonQuote(std::string_view s);

// Unix milliseconds as UTC to the second: "2026-11-29T19:35:57Z".
std::string utcTimestamp(int64_t unix_ms);

// The reason phrase of an HTTP status code the tree's HTTP servers send (the agent's, the
// webhook's): "Not Found"; "Status" for any other code (the phrase is informative only, RFC
// 9112 section 4).
const char* httpReasonPhrase(int status);

}  // namespace tq
