#include "nccl-plugin/oob/envelope.h"

#include <cstring>
#include <string>

#include "nccl-plugin/wire_bytes.h"

namespace tq::plugin::oob {

using namespace wire;  // NOLINT: byte helpers

void startEnvelope(uint8_t* out, size_t size, uint64_t magic, uint16_t version) {
  std::memset(out, 0, size);
  put64(out, magic);
  put16(out + 8, version);
}

void sealEnvelope(uint8_t* out, size_t size) { put32(out + size - 4, crcOf(out, size - 4)); }

Result<uint16_t> openEnvelope(const uint8_t* p, size_t len, size_t size, uint64_t magic,
                              std::string_view what, std::string_view expected) {
  if (len < size) {
    return bad(what,
               "truncated (" + std::to_string(len) + " of " + std::to_string(size) + " bytes)");
  }
  if (get64(p) != magic) return bad(what, "bad magic (not " + std::string(expected) + ")");
  if (get32(p + size - 4) != crcOf(p, size - 4)) {
    return bad(what, "crc mismatch (corrupted in transit?)");
  }
  return get16(p + 8);
}

Status expectVersion(uint16_t got, uint16_t want, std::string_view what) {
  if (got == want) return okStatus();
  return bad(what, "protocol version " + std::to_string(got) + ", this plugin speaks " +
                       std::to_string(want));
}

}  // namespace tq::plugin::oob
