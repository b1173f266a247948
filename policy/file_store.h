// The embedded, durable PolicyStore: one file per version under <data_dir>/versions/,
//   <data_dir>/versions/00000000000000000007.tqrec
// each holding one encoded record (store.h), written with writeFileAtomic (temporary file,
// fsync, rename, fsync of the directory) before append() returns. Opening the store reads and
// verifies every record: corrupt ones are logged, counted (corruptRecords) and listed with
// intact = false; latest() is the newest intact record. Version numbers are never reused, so the
// next version is one past the highest file name seen, corrupt or not. Leftover temporaries of
// an interrupted write are removed when the store opens. The epoch is <data_dir>/store-epoch,
// written (atomically) when the store is created, or when a store from before epochs is opened.
// Retention unlinks the records of versions older than the newest `retain_versions` after each
// append.
// Thread-safety: internally synchronised (one mutex); append() blocks on disk I/O.
#pragma once

#include <memory>
#include <string>

#include "common/file_util.h"
#include "policy/store.h"

namespace tq::policy {

struct FileStoreOptions {
  // Fault injection for tests: called between the fsync of a record's temporary file and its
  // rename (common/file_util.h). A non-ok return fails the append.
  BeforeRenameHook before_rename = nullptr;
  // Records larger than this are reported as corrupt rather than read (a policy is <= 4 MiB).
  uint64_t max_record_bytes = 64u << 20;
  uint64_t retain_versions = kDefaultRetainVersions;  // >= 1
};

inline constexpr char kStoreEpochFileName[] = "store-epoch";

// Opens (creating if needed) the store under `data_dir`. Fails with a clear message if the
// directory cannot be created or written, or is not a directory.
Result<std::unique_ptr<PolicyStore>> openFileStore(const std::string& data_dir,
                                                   FileStoreOptions options = {});

// The file name of a version's record inside <data_dir>/versions/.
std::string recordFileName(uint64_t version);

}  // namespace tq::policy
