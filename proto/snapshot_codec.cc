#include "proto/snapshot_codec.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <string>

namespace tq::proto {

namespace v1 = tenantqos::v1;

Result<v1::PolicySnapshot> deflateSnapshot(const v1::PolicySnapshot& plain) {
  if (!plain.deflated().empty()) {
    return invalidArgument("deflate policy snapshot v" + std::to_string(plain.version()) +
                           ": it is deflated already");
  }
  std::string raw;
  if (!plain.SerializeToString(&raw)) {
    return internalError("deflate policy snapshot v" + std::to_string(plain.version()) +
                         ": it does not serialise");
  }
  return deflateSerializedSnapshot(plain.version(), plain.store_epoch(), raw);
}

Result<v1::PolicySnapshot> deflateSerializedSnapshot(uint64_t version,
                                                     const std::string& store_epoch,
                                                     std::string_view serialized) {
  uLongf size = compressBound(static_cast<uLong>(serialized.size()));
  std::string packed(size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(packed.data()), &size,
                           reinterpret_cast<const Bytef*>(serialized.data()),
                           static_cast<uLong>(serialized.size()), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) {
    return internalError("deflate policy snapshot v" + std::to_string(version) +
                         ": zlib compress2 returned " + std::to_string(rc));
  }
  packed.resize(size);
  v1::PolicySnapshot out;
  out.set_version(version);
  out.set_store_epoch(store_epoch);
  out.set_deflated(std::move(packed));
  return out;
}

namespace {

// zlib stream `in` inflated, at most `max_bytes` of output.
Result<std::string> inflateBounded(const std::string& in, size_t max_bytes) {
  if (in.size() > std::numeric_limits<uInt>::max()) {
    return invalidArgument(std::to_string(in.size()) + " bytes, more than zlib reads at once");
  }
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return internalError("zlib inflateInit failed");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  // Grown as output comes, never past max_bytes + 1 (the byte that proves it is too large).
  const size_t limit = max_bytes + 1;
  out.resize(std::min(limit, std::max<size_t>(in.size() * 4, 4096)));
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (out.size() >= limit) break;
      out.resize(std::min(limit, out.size() * 2));
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = static_cast<uInt>(out.size() - have);
    const int rc = inflate(&z, Z_NO_FLUSH);
    have = out.size() - z.avail_out;
    if (rc == Z_STREAM_END && have <= max_bytes) {
      if (z.avail_in != 0) {
        return invalidArgument(std::to_string(z.avail_in) + " bytes follow the zlib stream");
      }
      out.resize(have);
      return out;
    }
    if (rc == Z_STREAM_END) break;  // one byte too many
    if (rc == Z_BUF_ERROR && z.avail_out != 0)
      return invalidArgument("the zlib stream is truncated");
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return invalidArgument(
          std::string("not a valid zlib stream (") +
          (z.msg != nullptr ? z.msg : ("zlib error " + std::to_string(rc)).c_str()) + ")");
    }
  }
  return invalidArgument("it inflates to more than " + std::to_string(max_bytes) + " bytes");
}

}  // namespace

Result<v1::PolicySnapshot> inflateSnapshot(v1::PolicySnapshot msg, size_t max_bytes) {
  if (msg.deflated().empty()) return msg;
  const std::string what = "deflated policy snapshot v" + std::to_string(msg.version());
  Result<std::string> raw = inflateBounded(msg.deflated(), max_bytes);
  if (!raw.ok()) return invalidArgument(what + ": " + raw.status().message());
  v1::PolicySnapshot inner;
  if (!inner.ParseFromString(*raw)) {
    return invalidArgument(what + ": what it inflates to is not a tenantqos.v1.PolicySnapshot");
  }
  if (!inner.deflated().empty()) return invalidArgument(what + ": it holds another deflated one");
  if (inner.version() != msg.version() || inner.store_epoch() != msg.store_epoch()) {
    return invalidArgument(what + " of store \"" + msg.store_epoch() + "\": it holds v" +
                           std::to_string(inner.version()) + " of store \"" + inner.store_epoch() +
                           "\"");
  }
  msg.clear_version();
  msg.clear_store_epoch();
  msg.clear_deflated();
  if (msg.ByteSizeLong() != 0) {
    return invalidArgument(what + ": fields other than version and store_epoch are set beside it");
  }
  return inner;
}

}  // namespace tq::proto
