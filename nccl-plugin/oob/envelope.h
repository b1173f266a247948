// The envelope of every fixed-size message of the out-of-band layer (both transports' handles,
// hellos, replies and ready messages), so the checks every parser of the network's bytes must
// make are written once:
//   0 u64 magic | 8 u16 version | ... the message's own fields ... | size-4 u32 CRC-32C of
//   bytes [0, size-4)
// Each transport documents its messages' fields (socket/wire.h, ib/ib_wire.h) and keeps its
// own magics and version. Pure functions over byte arrays (fuzzed: nccl-plugin/fuzz/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tq::plugin::oob {

// Zeroes out[0, size) and writes the magic and version. The caller then fills its fields and
// seals.
void startEnvelope(uint8_t* out, size_t size, uint64_t magic, uint16_t version);
// Writes the CRC (last): no field may change afterwards.
void sealEnvelope(uint8_t* out, size_t size);

// Checks that `len` holds a `size`-byte message with `magic` and an intact CRC; returns its
// version (any: the caller decides what it speaks, and may name the version it got). Errors
// are kInvalidArgument "<what>: truncated (len of size bytes)", "<what>: bad magic (not
// <expected>)", "<what>: crc mismatch (corrupted in transit?)".
Result<uint16_t> openEnvelope(const uint8_t* p, size_t len, size_t size, uint64_t magic,
                              std::string_view what, std::string_view expected);
// kInvalidArgument "<what>: protocol version <got>, this plugin speaks <want>" unless equal.
Status expectVersion(uint16_t got, uint16_t want, std::string_view what);

}  // namespace tq::plugin::oob
