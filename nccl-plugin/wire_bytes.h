// Byte-level helpers shared by the transports' wire formats (socket/wire.h, ib/ib_wire.h):
// little-endian fixed-width fields, CRC-32C, reserved-zero checks and NUL-padded text fields.
// Pure inline functions; every format that uses them documents its own layout.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/file_util.h"
#include "common/status.h"

namespace tq::plugin::wire {

// An 8-character ASCII magic as the little-endian u64 it is stored as.
constexpr uint64_t magic64(const char (&s)[9]) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

inline void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint32_t crcOf(const uint8_t* p, size_t n) {
  return crc32c(std::string_view(reinterpret_cast<const char*>(p), n));
}

inline bool allZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

// kInvalidArgument "<what>: <why>": every rejection says what was parsed and why it failed.
inline Status bad(std::string_view what, std::string_view why) {
  return invalidArgument(std::string(what) + ": " + std::string(why));
}

// Text fields: NUL-padded, printable ASCII only (they end up in log lines).
inline Result<std::string> getText(const uint8_t* p, size_t cap, size_t len,
                                   std::string_view what) {
  if (len > cap) return bad(what, "text length out of range");
  for (size_t i = 0; i < len; ++i) {
    if (p[i] < 0x20 || p[i] > 0x7e) return bad(what, "non-printable text");
  }
  if (!allZero(p + len, cap - len)) return bad(what, "text not NUL-padded");
  return std::string(reinterpret_cast<const char*>(p), len);
}

// Writes `text` (truncated to cap) NUL-padded into p[0..cap); returns the length written.
inline size_t putText(uint8_t* p, size_t cap, std::string_view text) {
  const size_t n = std::min(text.size(), cap);
  for (size_t i = 0; i < cap; ++i) {
    const uint8_t c = i < n ? static_cast<uint8_t>(text[i]) : 0;
    p[i] = (i < n && (c < 0x20 || c > 0x7e)) ? '?' : c;
  }
  return n;
}

}  // namespace tq::plugin::wire
