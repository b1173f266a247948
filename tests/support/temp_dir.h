// A fresh directory for a test's (or a benchmark's) files, removed with everything below it when
// the TempDir goes: the one temporary-directory class of tests/ and bench/. Test-only (never
// in shipped binaries); header-only, so that any test or bench target (the rxe VM's included)
// may use it without a link dependency. Not thread-safe.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace tq::testing {

class TempDir {
 public:
  // /tmp/<prefix>-XXXXXX, mode 0700 (mkdtemp). When it cannot be made, path() is "" and error()
  // says why (a test then fails on its first use of the path, the caller may check ok()).
  explicit TempDir(const std::string& prefix = "tq") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) {
      path_ = std::move(tmpl);
    } else {
      error_ = "mkdtemp " + tmpl + ": " + std::strerror(errno);
    }
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) std::fprintf(stderr, "TempDir: remove %s: %s\n", path_.c_str(), ec.message().c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }
  // path()/rel.
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
  std::string error_;
};

}  // namespace tq::testing
