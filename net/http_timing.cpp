// How long HTTP transfers should take: the pause before a retry (full jitter), the link's
// latency and rate as observed, and from them the deadline of an attempt (HttpClient).
#include <algorithm>
#include <chrono>
#include <mutex>

#include "net/http_client.h"

namespace fid::net {

std::chrono::milliseconds RetryPolicy::backoff(unsigned retry, double unit) const {
  const unsigned doublings = std::min(retry == 0 ? 0u : retry - 1, 30u);
  const auto ceiling = std::min<int64_t>(cap.count(), base.count() << doublings);
  const double u = std::clamp(unit, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(u * static_cast<double>(ceiling)));
}

uint64_t HttpClient::bandwidth_delay_bytes() const {
  std::lock_guard lock(timing_mu_);
  return static_cast<uint64_t>(latency_s_ * rate_bps_);
}

void HttpClient::observe(uint64_t body_bytes, double first_byte_s, double body_s) {
  constexpr double kWeight = 0.2;  // of the newest sample
  const double rate = static_cast<double>(body_bytes) / body_s;
  std::lock_guard lock(timing_mu_);
  latency_s_ = rate_bps_ == 0 ? first_byte_s : (1 - kWeight) * latency_s_ + kWeight * first_byte_s;
  rate_bps_ = rate_bps_ == 0 ? rate : (1 - kWeight) * rate_bps_ + kWeight * rate;
}

std::chrono::milliseconds HttpClient::attempt_deadline(uint64_t bytes) const {
  double expected_s;
  {
    std::lock_guard lock(timing_mu_);
    expected_s = rate_bps_ > 0 ? latency_s_ + static_cast<double>(bytes) / rate_bps_
                               : static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(opts_.min_rate_bps, 1));
  }
  return opts_.attempt_floor + std::chrono::milliseconds(static_cast<int64_t>(std::min(4e3 * expected_s, 1e9)));
}

}  // namespace fid::net
