// Exponential backoff with jitter, for reconnecting to policyd and retrying a failed reconcile.
//
// Delay n (n = 0, 1, ...) is min(max, initial * multiplier^n) scaled by a uniform factor in
// [1 - jitter, 1 + jitter], then clamped to [initial * (1 - jitter), max]. The jitter keeps a
// fleet of agents from reconnecting in lockstep after a policyd restart. Pure and deterministic
// for a given seed; time is the caller's business (it adds the delay to its Clock's now).
// Thread-compatible (one owner).
#pragma once

#include <cstdint>
#include <random>

namespace tq {

struct BackoffOptions {
  int64_t initial_ns = 100'000'000;  // 100 ms
  int64_t max_ns = 5'000'000'000;    // 5 s
  double multiplier = 2.0;
  double jitter = 0.2;  // 0 .. 1
};

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());

  // The delay before the next attempt; each call grows the base delay.
  int64_t nextDelayNs();
  // After a success: the next failure starts again at `initial`.
  void reset() {
    exponent_ = 0;
    failures_ = 0;
  }
  // nextDelayNs() calls since construction or the last reset().
  int failures() const { return failures_; }
  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
  int exponent_ = 0;
  int failures_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace tq
