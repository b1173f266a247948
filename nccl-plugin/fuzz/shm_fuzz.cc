// libFuzzer target for the readers of tenant-writable memory, the node trust boundary's other
// side of the wire: what a hostile tenant can put in its shared page (the agent's checkCounters
// and the plugin's clamped token bucket), the attach protocol's two messages and the
// traffic-classes file. Any input must be refused or accepted within bounds — never crash, hang,
// overflow or read out of bounds (ASan/UBSan on).
//
// Properties beyond "no crash": checkCounters never counts more than its stated bounds and its
// baseline always ends at the value read; a take from any bucket word never starts with more
// than one burst of tokens and never leaves more than kMaxBucketDebtNs of debt; an accepted
// attach message re-encodes to the same fields.
#include <cstdint>
#include <cstring>

#include "common/attach_protocol.h"
#include "common/tenant_shm.h"
#include "common/token_bucket.h"

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

namespace {

template <typename T>
T take(const uint8_t*& p, size_t& n) {
  T v{};
  const size_t k = n < sizeof(T) ? n : sizeof(T);
  std::memcpy(&v, p, k);
  p += k;
  n -= k;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq;
  // The agent: every counter block of the input as a page image, read twice (the second
  // reading against the baseline the first one left), as collect() does each period.
  {
    const uint8_t* p = data;
    size_t n = size;
    const int64_t now = 1'000'000'000'000 + static_cast<int64_t>(take<uint32_t>(p, n));
    const int64_t elapsed = static_cast<int64_t>(take<uint32_t>(p, n));
    const uint64_t max_rate = take<uint64_t>(p, n);
    const size_t blocks = size / sizeof(shm::Counters) + 1;
    for (size_t i = 0; i < blocks && i < 64; ++i) {
      const size_t off = i * sizeof(shm::Counters);
      CounterBaseline base;
      const CounterSample s = countersFromBytes(data + off, off < size ? size - off : 0);
      const CounterCheck c1 = checkCounters(&base, s, now, elapsed, max_rate);
      FUZZ_CHECK(base.bytes == s.bytes);
      FUZZ_CHECK(c1.bytes <= s.bytes && c1.backlog_bytes <= (1ull << 40));
      const uint64_t time_bound = static_cast<uint64_t>(elapsed) + 1'000'000'000;
      FUZZ_CHECK(c1.throttled_ns <= time_bound && c1.busy_ns <= time_bound &&
                 c1.peer_wait_ns <= time_bound);
      const CounterCheck c2 = checkCounters(&base, s, now, elapsed, max_rate);
      FUZZ_CHECK(c2.bytes == 0 && c2.peer_wait_ns == 0);  // nothing new: nothing counted
    }
    (void)countersFromPage(data, size, take<uint32_t>(p, n), take<uint32_t>(p, n));
  }
  // The plugin: the bucket word is whatever the tenant wrote.
  {
    const uint8_t* p = data;
    size_t n = size;
    std::atomic<int64_t> word{take<int64_t>(p, n)};
    std::atomic<int64_t> floor{take<int64_t>(p, n) % (int64_t{1} << 50)};
    BucketConfig cfg;
    cfg.rate_bytes_per_second = take<uint64_t>(p, n);
    cfg.burst_bytes = take<uint32_t>(p, n);
    const uint64_t bytes = take<uint64_t>(p, n);
    const int64_t now = (int64_t{1} << 50) + static_cast<int64_t>(take<uint32_t>(p, n));
    const int64_t before = word.load();
    const bool ok = bucketTryTake(word, now, bytes, cfg, &floor);
    if (ok) {
      const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
      const int64_t cost_ns =
          std::min(bucketCostNs(bytes, cfg.rate_bytes_per_second), kMaxBucketDebtNs);
      // The take started no earlier than one burst ago, and leaves at most the debt bound.
      FUZZ_CHECK(word.load() - cost_ns >= now - burst_ns);
      FUZZ_CHECK(word.load() <= now + kMaxBucketDebtNs);
    } else {
      FUZZ_CHECK(word.load() == before || word.load() == now);  // untouched, or repaired
    }
    FUZZ_CHECK(bucketReadyAt(word, now, bytes, cfg, &floor) >= now);
    (void)bucketAvailable(word, now, cfg, &floor);
  }
  // The agent reads a request from any process; the plugin a reply from the socket it reached.
  if (auto r = attach::parseRequest(data, size); r.ok()) {
    const std::string again = attach::encodeRequest(*r);
    auto r2 = attach::parseRequest(reinterpret_cast<const uint8_t*>(again.data()), again.size());
    FUZZ_CHECK(r2.ok() && r2->wanted_tenant == r->wanted_tenant);
  }
  if (auto r = attach::parseReply(data, size); r.ok()) {
    FUZZ_CHECK(r->tenant.size() < attach::kNameBytes && r->reason.size() < attach::kReasonBytes);
    if (r->status == attach::ReplyStatus::kAttached) FUZZ_CHECK(isDns1123Label(r->tenant));
  }
  // Parameters as a page image (agent-written, still read with a bounded seqlock).
  {
    alignas(shm::ParamsPage) static uint8_t buf[sizeof(shm::ParamsPage)];
    std::memset(buf, 0, sizeof(buf));
    std::memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    auto v = readParams(*reinterpret_cast<const shm::ParamsPage*>(buf));
    if (v) {
      FUZZ_CHECK(v->traffic_classes.size() <= shm::kMaxTrafficClasses);
      FUZZ_CHECK(v->buckets.size() <= shm::kMaxBuckets);
      for (const BucketSpec& b : v->buckets) {
        FUZZ_CHECK(b.name.size() < shm::kBucketNameBytes);
        FUZZ_CHECK(b.scope == shm::kScopeNone ||
                   b.index < (b.scope == shm::kScopeDevice ? shm::kMaxDeviceBuckets
                                                           : shm::kMaxLinkBuckets));
      }
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto t = attach::lookupTrafficClass(text, size > 0 ? data[0] : 0)) {
    FUZZ_CHECK(isDns1123Label(*t));
  }
  return 0;
}
