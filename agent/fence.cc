#include "agent/fence.h"

#include <algorithm>
#include <cstdio>

#include "common/units.h"

namespace tq::agent {
namespace {

constexpr double kCountedTolerance = 0.05;
constexpr double kKernelTolerance = 0.12;
constexpr uint64_t kMinSlackPerProcess = 64 * 1024;

double slackFor(uint64_t depth, uint32_t processes) {
  return static_cast<double>((processes + 1) * std::max<uint64_t>(depth, kMinSlackPerProcess));
}

}  // namespace

void Fence::owe(double over, uint64_t allocated, const std::string& what) {
  const double cap = static_cast<double>(allocated) * static_cast<double>(kMaxDebtNs) / 1e9;
  debt_ = static_cast<uint64_t>(std::min(static_cast<double>(debt_) + over, cap));
  overrun_total_ += static_cast<uint64_t>(over);
  report_ = what + ": " + formatSize(static_cast<uint64_t>(over)) + " over";
  // Paid back evenly over the next window (at the floor below, over a few).
  repay_rate_ = static_cast<uint64_t>(static_cast<double>(debt_) * 1e9 / kWindowNs);
}

uint64_t Fence::step(int64_t now_ns, int64_t period_ns, uint64_t allocated, uint64_t counted,
                     uint64_t depth, uint32_t processes) {
  if (processes == 0) {
    // Nobody left to owe anything: a new window starts with the next process.
    *this = Fence{};
    last_rate_ = allocated;
    return allocated;
  }
  allocated_ = allocated;
  const double allowed =
      static_cast<double>(last_rate_) * static_cast<double>(std::max<int64_t>(period_ns, 0)) / 1e9;
  if (window_start_ns_ == 0) {
    window_start_ns_ = now_ns;
  } else {
    allowed_ += allowed;
    counted_ += counted;
    if (kernel_last_) kernel_allowed_ += allowed;
  }
  if (now_ns - window_start_ns_ >= kWindowNs) {
    if (static_cast<double>(counted_) >
        allowed_ * (1 + kCountedTolerance) + slackFor(depth, processes)) {
      char what[160];
      std::snprintf(
          what, sizeof what, "its processes counted %s in %.2f s where its bucket allowed %s",
          formatSize(counted_).c_str(), static_cast<double>(now_ns - window_start_ns_) / 1e9,
          formatSize(static_cast<uint64_t>(allowed_)).c_str());
      owe(static_cast<double>(counted_) - allowed_, allocated, what);
    }
    window_start_ns_ = now_ns;
    allowed_ = 0;
    counted_ = 0;
  }
  uint64_t rate = allocated;
  if (debt_ > 0) {
    // The rate never below a quarter of the allocation.
    const uint64_t cut =
        std::min<uint64_t>(std::max<uint64_t>(repay_rate_, 1), allocated - allocated / 4);
    rate = allocated - cut;
    const uint64_t paid = static_cast<uint64_t>(
        static_cast<double>(cut) * static_cast<double>(std::max<int64_t>(period_ns, 0)) / 1e9);
    debt_ -= std::min(debt_, std::max<uint64_t>(paid, 1));
  }
  last_rate_ = rate;
  return rate;
}

void Fence::kernelReading(uint64_t total, uint64_t depth, uint32_t processes) {
  if (processes == 0 || !kernel_last_ || total < *kernel_last_) {
    kernel_last_ = total;  // a first reading, or the class was made again: a new baseline
    kernel_allowed_ = 0;
    return;
  }
  const double k = static_cast<double>(total - *kernel_last_);
  const double allowed = kernel_allowed_ * (1 + kKernelTolerance);
  if (k > allowed + slackFor(depth, processes)) {
    owe(k - allowed, allocated_,
        "the kernel counted " + formatSize(static_cast<uint64_t>(k)) +
            " in its class where its bucket allowed " +
            formatSize(static_cast<uint64_t>(kernel_allowed_)));
  }
  kernel_last_ = total;
  kernel_allowed_ = 0;
}

std::optional<std::string> Fence::takeReport() {
  std::optional<std::string> r = std::move(report_);
  report_.reset();
  return r;
}

}  // namespace tq::agent
