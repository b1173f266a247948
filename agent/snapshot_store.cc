#include "agent/snapshot_store.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include "common/file_util.h"
#include "proto/convert.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::agent {
namespace {

constexpr char kMagicLine[] = "tenantqos-agent-snapshot 1\n";
constexpr uint64_t kMaxSnapshotBytes = 64u << 20;

}  // namespace

SnapshotStore::SnapshotStore(std::string state_dir)
    : dir_(std::move(state_dir)), path_(dir_ + "/" + kSnapshotFileName) {}

std::string SnapshotStore::encode(const VersionedPolicy& snapshot) {
  tenantqos::v1::PolicySnapshot msg;
  msg.set_version(snapshot.version);
  *msg.mutable_policy() = proto::toProto(snapshot.policy);
  msg.set_store_epoch(snapshot.store_epoch);
  std::string body;
  msg.SerializeToString(&body);
  char header[64];
  std::snprintf(header, sizeof header, "crc32c=%08" PRIx32 " length=%zu\n", crc32c(body),
                body.size());
  return std::string(kMagicLine) + header + body;
}

Result<VersionedPolicy> SnapshotStore::decode(const std::string& data, const std::string& what) {
  const std::string magic = kMagicLine;
  if (data.compare(0, magic.size(), magic) != 0) {
    return dataLoss(what + ": not a tenantqos agent snapshot (bad first line)");
  }
  const size_t eol = data.find('\n', magic.size());
  if (eol == std::string::npos) return dataLoss(what + ": truncated header");
  const std::string line = data.substr(magic.size(), eol - magic.size());
  uint32_t crc = 0;
  size_t length = 0;
  int consumed = 0;
  if (std::sscanf(line.c_str(), "crc32c=%8" SCNx32 " length=%zu%n", &crc, &length, &consumed) !=
          2 ||
      static_cast<size_t>(consumed) != line.size()) {
    return dataLoss(what + ": malformed header \"" + line + "\"");
  }
  const std::string body = data.substr(eol + 1);
  if (body.size() != length) {
    return dataLoss(what + ": body is " + std::to_string(body.size()) + " bytes, header says " +
                    std::to_string(length));
  }
  if (crc32c(body) != crc) return dataLoss(what + ": checksum mismatch");
  tenantqos::v1::PolicySnapshot msg;
  if (!msg.ParseFromString(body)) return dataLoss(what + ": protobuf body does not parse");
  return proto::fromSnapshot(msg);
}

Status SnapshotStore::save(const VersionedPolicy& snapshot, BeforeRenameHook hook) {
  TQ_RETURN_IF_ERROR_CTX(makeDirs(dir_, 0755), "create state directory " + dir_);
  return writeFileAtomic(path_, encode(snapshot), 0644, hook)
      .withContext("persist policy v" + std::to_string(snapshot.version));
}

Result<std::optional<VersionedPolicy>> SnapshotStore::load() const {
  auto data = readFile(path_, kMaxSnapshotBytes);
  if (!data.ok()) {
    if (data.status().code() == StatusCode::kNotFound) return std::optional<VersionedPolicy>();
    return data.status().withContext("read persisted policy");
  }
  TQ_ASSIGN_OR_RETURN(VersionedPolicy p, decode(*data, path_));
  return std::optional<VersionedPolicy>(std::move(p));
}

Status SnapshotStore::remove() {
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return errnoStatus("unlink " + path_);
  return okStatus();
}

}  // namespace tq::agent
