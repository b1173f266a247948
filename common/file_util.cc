#include "common/file_util.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>

#include "common/fd.h"

namespace tq {

std::string parentDir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status writeAll(int fd, std::string_view data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoStatus("write " + path);
    }
    off += static_cast<size_t>(n);
  }
  return okStatus();
}

Status fsyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return errnoStatus("open directory " + dir);
  if (::fsync(fd.get()) != 0) return errnoStatus("fsync directory " + dir);
  return okStatus();
}

Status writeFileAtomic(const std::string& path, std::string_view data, uint32_t mode,
                       BeforeRenameHook hook) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.valid()) return errnoStatus("create " + tmp);
  Status st = writeAll(fd.get(), data, tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = errnoStatus("fsync " + tmp);
  Status closed = fd.close(tmp);
  if (st.ok()) st = std::move(closed);
  if (st.ok() && hook != nullptr) st = hook(tmp, path);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = errnoStatus("rename " + tmp + " to " + path);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return fsyncDir(parentDir(path));
}

Result<std::string> readFile(const std::string& path, uint64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoStatus("open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return resourceExhausted(path + ": file is " + std::to_string(st.st_size) +
                             " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  return readFd(fd.get(), path, max_bytes);
}

Result<std::string> readFd(int fd, const std::string& name, uint64_t max_bytes) {
  std::string out;
  std::array<char, 65536> buf;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoStatus("read " + name);
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return resourceExhausted(name + ": file is larger than the limit of " +
                               std::to_string(max_bytes) + " bytes");
    }
  }
  return out;
}

Status makeDirs(const std::string& path, uint32_t mode) {
  if (path.empty()) return invalidArgument("makeDirs: empty path");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return errnoStatus("mkdir " + cur);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errnoStatus("stat " + path);
  if (!S_ISDIR(st.st_mode)) return failedPrecondition(path + ": exists and is not a directory");
  return okStatus();
}

Status checkWritableDir(const std::string& dir) {
  TQ_RETURN_IF_ERROR(makeDirs(dir, 0755));
  std::string probe = dir + "/.write-probe." + std::to_string(::getpid());
  Fd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return errnoStatus("directory " + dir + " is not writable: create " + probe);
  fd.reset();
  ::unlink(probe.c_str());
  return okStatus();
}

uint32_t crc32c(std::string_view data, uint32_t seed) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = ~seed;
  for (unsigned char ch : data) crc = kTable[(crc ^ ch) & 0xff] ^ (crc >> 8);
  return ~crc;
}

Result<uint64_t> raiseOpenFileLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return errnoStatus("getrlimit RLIMIT_NOFILE");
  if (rl.rlim_cur < rl.rlim_max) {
    const rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      return errnoStatus("raise RLIMIT_NOFILE from " + std::to_string(was) + " to " +
                         std::to_string(rl.rlim_max));
    }
  }
  return static_cast<uint64_t>(rl.rlim_cur);
}

}  // namespace tq
