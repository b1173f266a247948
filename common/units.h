// Parsing and formatting of rates, sizes and percentages as written in policy files and flags.
//
// Rates use decimal SI prefixes. Bit rates: "40Gbps", "100Mbit", "1.5Gbps", "500mbps",
// plain "1000000" (bits per second). Byte rates: "125MB/s", "1.5GB/s", "10kB/s".
// Sizes: "256KiB", "4MiB" (binary), "64KB", "1MB" (decimal), plain bytes.
// Internally and on the wire a rate is an integer number of BYTES per second; a bit rate that is
// not a whole number of bytes is rounded to the nearest byte.
// Negative values, overflow (> 2^64-1 bytes/s) and unknown suffixes are errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tq {

// Bytes per second.
Result<uint64_t> parseRate(std::string_view text);
// Bytes.
Result<uint64_t> parseSize(std::string_view text);
// "5%" or "5" -> 5.0. Range [0, 100].
Result<double> parsePercent(std::string_view text);

// Shortest exact-ish text for a rate in bits per second: 5000000000 B/s -> "40Gbps",
// 187500000 -> "1.5Gbps", 0 -> "0bps". At most 3 decimals.
std::string formatRate(uint64_t bytes_per_second);
// Human size: 262144 -> "256KiB", 1000 -> "1000B".
std::string formatSize(uint64_t bytes);

}  // namespace tq
