#include "common/backoff.h"

#include <algorithm>
#include <cmath>

namespace tq {

Backoff::Backoff(BackoffOptions options, uint64_t seed) : options_(options), rng_(seed) {
  options_.initial_ns = std::max<int64_t>(options_.initial_ns, 1);
  options_.max_ns = std::max(options_.max_ns, options_.initial_ns);
  options_.multiplier = std::max(options_.multiplier, 1.0);
  options_.jitter = std::clamp(options_.jitter, 0.0, 1.0);
}

int64_t Backoff::nextDelayNs() {
  const double base =
      std::min(static_cast<double>(options_.max_ns),
               static_cast<double>(options_.initial_ns) * std::pow(options_.multiplier, exponent_));
  // Stop growing the exponent once the cap is reached (keeps pow() finite forever).
  if (base < static_cast<double>(options_.max_ns)) ++exponent_;
  ++failures_;
  std::uniform_real_distribution<double> u(1.0 - options_.jitter, 1.0 + options_.jitter);
  const double lo = static_cast<double>(options_.initial_ns) * (1.0 - options_.jitter);
  const double d = std::clamp(base * u(rng_), lo, static_cast<double>(options_.max_ns));
  return std::max<int64_t>(1, static_cast<int64_t>(d));
}

}  // namespace tq
