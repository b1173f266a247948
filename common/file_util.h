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

// mkdir -p with the given mode for created directories.
Status makeDirs(const std::string& path, uint32_t mode = 0755);

// Fails with a clear message if `dir` cannot be created or written (creates and removes a probe).
Status checkWritableDir(const std::string& dir);

// CRC-32C (Castagnoli) of data, used as the checksum of stored records.
uint32_t crc32c(std::string_view data, uint32_t seed = 0);

}  // namespace tq
