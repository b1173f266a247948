// The plugin under real NCCL on real GPUs: two ranks all-reduce through
// NCCL_NET_PLUGIN=tenantqos NCCL_NET=tenantqos.
//
//   nccl_allreduce_gpu_test <path/to/libnccl-net-tenantqos.so>
//
// The launcher (this process) starts two rank processes (fork + exec of itself, before any of
// them touches CUDA) and checks, each a failure with its reason:
//   1. lifecycle: in each rank, two communicators one after the other (init, all-reduce of
//      1 Mi + 1001 floats checked element by element, ncclCommDestroy), then exit 0 after the
//      last destroy: NCCL finalizes and dlcloses the plugin, nothing of it may be left running
//      (issue 10 item 1 through real NCCL);
//   2. NCCL's INFO log of every rank says "Using network tenantqos" and carries the plugin's
//      "NET/tenantqos" lines;
//   3. rate: with TENANTQOS_RATE (default 2Gbps; TQ_GPU_RATE overrides) the measured bus
//      bandwidth of a ring all-reduce is within [0.9, 1.05] of it.
// One GPU: both ranks use it and look like two hosts (distinct NCCL_HOSTID), so NCCL connects
// them through the net plugin and not P2P/SHM. Two or more GPUs: one each (still two "hosts").
// No GPU visible: exit 77 (ctest: Skipped) with the reason.
//
// NCCL's P2P and SHM transports are off as well (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1).
// NCCL's logs go to TQ_GPU_LOG_DIR (created if missing), else a new /tmp/tq-gpu-test.* directory.
// Defaults the caller may override: TENANTQOS_TRANSPORT=socket, TENANTQOS_SOCKET_IFNAME=lo,
// NCCL_SOCKET_IFNAME=lo. Every wait is bounded (kRankTimeoutSec).
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kRanks = 2;
constexpr int kRankTimeoutSec = 240;
constexpr double kRateLow = 0.90;
constexpr double kRateHigh = 1.05;
constexpr char kDefaultRate[] = "2Gbps";

#define CUDA_OK(call)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #call, \
                   cudaGetErrorString(e_));                                               \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)
#define NCCL_OK(call)                                                                     \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      std::fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #call, \
                   ncclGetErrorString(r_));                                               \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int g_rank = -1;  // -1 in the launcher

std::string toHex(const ncclUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

bool fromHex(const std::string& s, ncclUniqueId* id) {
  if (s.size() != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// "2Gbps", "500Mbps", "1.25GB/s" -> bytes per second; 0 when not understood. The plugin parses
// TENANTQOS_RATE itself; this only has to agree for the units used here.
double rateBytesPerSecond(const char* text) {
  if (text == nullptr) return 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  const std::string unit = end != nullptr ? end : "";
  if (unit == "Gbps") return v * 1e9 / 8;
  if (unit == "Mbps") return v * 1e6 / 8;
  if (unit == "GB/s") return v * 1e9;
  if (unit == "MB/s") return v * 1e6;
  return 0;
}

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- a rank ---------------------------------------------------------------------------------

// Element i of rank r's input is (r + 1) * (i % 7 + 1): small integers, exact in float, so the
// sum over both ranks is exactly 3 * (i % 7 + 1).
int allReduceChecked(ncclComm_t comm, cudaStream_t stream, size_t count) {
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((g_rank + 1) * (i % 7 + 1));
  void* send = nullptr;
  void* recv = nullptr;
  CUDA_OK(cudaMalloc(&send, count * sizeof(float)));
  CUDA_OK(cudaMalloc(&recv, count * sizeof(float)));
  CUDA_OK(cudaMemcpy(send, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(recv, 0, count * sizeof(float)));
  NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(send));
  CUDA_OK(cudaFree(recv));
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(3 * (i % 7 + 1));
    if (host[i] != want) {
      std::fprintf(stderr, "rank %d: all-reduce of %zu floats: element %zu is %g, want %g\n",
                   g_rank, count, i, static_cast<double>(host[i]), static_cast<double>(want));
      return 1;
    }
  }
  return 0;
}

// Ring all-reduce of `bytes`, timed over ~3 s after a warm-up. With 2 ranks each rank sends
// `bytes` per all-reduce (reduce-scatter + all-gather of half each), so bus bandwidth =
// algorithm bandwidth = bytes / time, and a rank paced at R bytes/s reaches R.
int measureRate(ncclComm_t comm, cudaStream_t stream, double rate) {
  const size_t bytes = 32u << 20;
  const size_t count = bytes / sizeof(float);
  void* buf = nullptr;
  CUDA_OK(cudaMalloc(&buf, bytes));
  CUDA_OK(cudaMemset(buf, 0, bytes));
  for (int i = 0; i < 3; ++i) {
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  const int iters = std::max(5, static_cast<int>(std::ceil(3.0 * rate / bytes)));
  const double t0 = nowSec();
  for (int i = 0; i < iters; ++i) {
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  const double busbw = static_cast<double>(bytes) * iters / (nowSec() - t0);
  CUDA_OK(cudaFree(buf));
  const double ratio = busbw / rate;
  std::printf(
      "rank %d: %d all-reduces of %zu bytes: bus bandwidth %.1f MB/s, %.3f of the rate "
      "%.1f MB/s\n",
      g_rank, iters, bytes, busbw / 1e6, ratio, rate / 1e6);
  if (ratio < kRateLow || ratio > kRateHigh) {
    std::fprintf(stderr, "rank %d: bus bandwidth %.3f of TENANTQOS_RATE, outside [%.2f, %.2f]\n",
                 g_rank, ratio, kRateLow, kRateHigh);
    return 1;
  }
  return 0;
}

// argv: --rank R --device D --phase lifecycle|rate ID_HEX...
int rankMain(int argc, char** argv) {
  g_rank = std::atoi(argv[2]);
  const int device = std::atoi(argv[4]);
  const std::string phase = argv[6];
  CUDA_OK(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (int k = 7; k < argc; ++k) {
    ncclUniqueId id;
    if (!fromHex(argv[k], &id)) {
      std::fprintf(stderr, "rank %d: bad unique id argument\n", g_rank);
      return 1;
    }
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, kRanks, id, g_rank));
    if (phase == "rate") {
      if (measureRate(comm, stream, rateBytesPerSecond(std::getenv("TENANTQOS_RATE"))) != 0) {
        return 1;
      }
    } else {
      if (allReduceChecked(comm, stream, (1u << 20) + 1001) != 0) return 1;
      if (allReduceChecked(comm, stream, 1001) != 0) return 1;
    }
    NCCL_OK(ncclCommDestroy(comm));
    std::printf("rank %d: communicator %d (%s) destroyed\n", g_rank, k - 6, phase.c_str());
  }
  CUDA_OK(cudaStreamDestroy(stream));
  std::fflush(stdout);
  return 0;  // exit after the last ncclCommDestroy: exit handlers of NCCL and the plugin run
}

// ---- the launcher ---------------------------------------------------------------------------

struct Phase {
  const char* name;
  int communicators;
  std::string rate;  // TENANTQOS_RATE for the ranks; empty: unpaced
};

std::string logPath(const std::string& dir, const Phase& ph, int rank) {
  return dir + "/" + ph.name + ".rank" + std::to_string(rank) + ".log";
}

// Starts the ranks of one phase and waits for them. Returns the failure text, empty when both
// exited 0.
std::string runPhase(const std::string& self, const std::string& plugin, const std::string& dir,
                     int gpus, const Phase& ph) {
  std::vector<std::string> ids;
  for (int c = 0; c < ph.communicators; ++c) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);  // the bootstrap root runs in this process
    if (r != ncclSuccess) return std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
    ids.push_back(toHex(id));
  }
  const std::string libdir = plugin.substr(0, plugin.rfind('/'));
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) {
      const char* ld = std::getenv("LD_LIBRARY_PATH");
      setenv("LD_LIBRARY_PATH", (libdir + (ld != nullptr ? ":" + std::string(ld) : "")).c_str(), 1);
      setenv("NCCL_NET_PLUGIN", "tenantqos", 1);
      setenv("NCCL_NET", "tenantqos", 1);
      setenv("NCCL_HOSTID", ("tq-gpu-test-host-" + std::to_string(rank)).c_str(), 1);
      setenv("NCCL_P2P_DISABLE", "1", 1);
      setenv("NCCL_SHM_DISABLE", "1", 1);
      setenv("NCCL_DEBUG", "INFO", 1);
      setenv("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV", 1);
      setenv("NCCL_DEBUG_FILE", logPath(dir, ph, rank).c_str(), 1);
      setenv("TENANTQOS_TRANSPORT", "socket", 0);
      setenv("TENANTQOS_SOCKET_IFNAME", "lo", 0);
      setenv("TENANTQOS_RUN_DIR", (dir + "/no-agent").c_str(), 1);
      if (!ph.rate.empty()) {
        setenv("TENANTQOS_RATE", ph.rate.c_str(), 1);
        setenv("NCCL_ALGO", "Ring", 1);
      } else {
        unsetenv("TENANTQOS_RATE");
      }
      const std::string r = std::to_string(rank);
      const std::string d = std::to_string(gpus > 1 ? rank : 0);
      std::vector<std::string> args = {self, "--rank", r, "--device", d, "--phase", ph.name};
      args.insert(args.end(), ids.begin(), ids.end());
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv(self.c_str(), cargs.data());
      std::fprintf(stderr, "exec %s: %s\n", self.c_str(), std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::string failure;
  const double deadline = nowSec() + kRankTimeoutSec;
  for (int rank = 0; rank < kRanks; ++rank) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pids[rank], &status, WNOHANG)) == 0 && nowSec() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (done == 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      waitpid(pids[rank], &status, 0);
      failure += "rank " + std::to_string(rank) + " did not finish within " +
                 std::to_string(kRankTimeoutSec) + " s; ";
    } else if (WIFSIGNALED(status)) {
      failure += "rank " + std::to_string(rank) + " died of signal " +
                 std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + "); ";
    } else if (WEXITSTATUS(status) != 0) {
      failure +=
          "rank " + std::to_string(rank) + " exited " + std::to_string(WEXITSTATUS(status)) + "; ";
    }
  }
  return failure;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int launcherMain(const std::string& self, const std::string& plugin) {
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus == 0) {
    std::printf("SKIP: no GPU visible (cudaGetDeviceCount: %s, %d devices)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "no error", gpus);
    return 77;
  }
  if (access(plugin.c_str(), R_OK) != 0 || plugin.find('/') == std::string::npos) {
    std::fprintf(stderr, "FAIL: plugin %s not readable (give its path)\n", plugin.c_str());
    return 1;
  }
  int version = 0;
  ncclGetVersion(&version);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // the bootstrap root runs here
  std::string dir;
  if (const char* d = std::getenv("TQ_GPU_LOG_DIR"); d != nullptr && *d != '\0') {
    dir = d;
    if (mkdir(d, 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "FAIL: mkdir %s (TQ_GPU_LOG_DIR): %s\n", d, std::strerror(errno));
      return 1;
    }
  } else {
    char tmpl[] = "/tmp/tq-gpu-test.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "FAIL: mkdtemp /tmp/tq-gpu-test.XXXXXX: %s\n", std::strerror(errno));
      return 1;
    }
    dir = tmpl;
  }
  const char* rate = std::getenv("TQ_GPU_RATE");
  const Phase phases[] = {{"lifecycle", 2, ""}, {"rate", 1, rate != nullptr ? rate : kDefaultRate}};
  if (rateBytesPerSecond(phases[1].rate.c_str()) <= 0) {
    std::fprintf(stderr, "FAIL: TQ_GPU_RATE=%s: use e.g. 2Gbps, 500Mbps or 1.25GB/s\n",
                 phases[1].rate.c_str());
    return 1;
  }
  std::printf("NCCL %d, %d GPU(s): %s, logs in %s\n", version, gpus,
              gpus > 1 ? "one per rank" : "both ranks on GPU 0 as two hosts", dir.c_str());
  int failed = 0;
  for (const Phase& ph : phases) {
    const int failed_before = failed;
    const std::string why = runPhase(self, plugin, dir, gpus, ph);
    if (!why.empty()) {
      std::fprintf(stderr, "FAIL [%s]: %s(logs: %s)\n", ph.name, why.c_str(), dir.c_str());
      failed = 1;
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      const std::string log = readFile(logPath(dir, ph, rank));
      if (log.find("Using network tenantqos") == std::string::npos) {
        std::fprintf(stderr,
                     "FAIL [%s]: rank %d: NCCL's log %s does not say \"Using network "
                     "tenantqos\"\n",
                     ph.name, rank, logPath(dir, ph, rank).c_str());
        failed = 1;
      }
      if (log.find("NET/tenantqos") == std::string::npos) {
        std::fprintf(stderr, "FAIL [%s]: rank %d: no NET/tenantqos line in %s\n", ph.name, rank,
                     logPath(dir, ph, rank).c_str());
        failed = 1;
      }
    }
    if (failed == failed_before) std::printf("PASS [%s]\n", ph.name);
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 8 && std::strcmp(argv[1], "--rank") == 0) return rankMain(argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <path/to/libnccl-net-tenantqos.so>\n", argv[0]);
    return 2;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "FAIL: readlink /proc/self/exe: %s\n", std::strerror(errno));
    return 1;
  }
  self[n] = '\0';
  return launcherMain(self, argv[1]);
}
