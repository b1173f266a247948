// Small, careful file helpers shared by the daemons: durable atomic replacement and bounded reads.
// Blocking I/O; thread-compatible (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tq {

// Seam for fault injection in tests of durability: called between the fsync of the temporary
// file and the rename. A non-ok return aborts the write (the temporary is removed).
using BeforeRenameHook = Status (*)(const std::string& tmp_path, const std::string& final_path);

// Replaces `path` with `data` so that a crash at any point leaves either the old or the new
// content: write to a temporary in the same directory, fsync it, rename over `path`, fsync the
// directory. Errors name the file and the failing step.
Status writeFileAtomic(const std::string& path, std::string_view data, uint32_t mode = 0644,
                       BeforeRenameHook hook = nullptr);

// Reads a whole file, failing with kResourceExhausted if it is larger than max_bytes.
Result<std::string> readFile(const std::string& path, uint64_t max_bytes = 64u << 20);
// The same from an open descriptor, to its end (for callers that judge the file on that
// descriptor first: owner, mode); errors name `name`.
Result<std::string> readFd(int fd, const std::string& name, uint64_t max_bytes);

// Writes all of `data` to `fd` (retrying short writes and EINTR); errors name `path`.
Status writeAll(int fd, std::string_view data, const std::string& path);

// fsync of a directory, so that names created or renamed in it survive a crash.
Status fsyncDir(const std::string& dir);

// The directory part of `path` ("." when there is none).
std::string parentDir(const std::string& path);

// Raises this process's open-file limit (RLIMIT_NOFILE) from its soft to its hard value, for
// daemons that hold an fd per peer or per tenant. Returns the soft limit now in force.
Result<uint64_t> raiseOpenFileLimit();

// mkdir -p with the given mode for created directories.
Status makeDirs(const std::string& path, uint32_t mode = 0755);

// Fails with a clear message if `dir` cannot be created or written (creates and removes a probe).
Status checkWritableDir(const std::string& dir);

// CRC-32C (Castagnoli) of data, used as the checksum of stored records.
uint32_t crc32c(std::string_view data, uint32_t seed = 0);

}  // namespace tq
