#include "core/l3_batcher.h"

#include <algorithm>
#include <cstdint>

#include "codec/l3.h"

namespace fid::core {

L3Batcher::L3Batcher(codec::L3BatchDecoder& decoder, Options options,
                     std::function<void(const std::string&)> on_decoder_error)
    : decoder_(decoder),
      options_{std::max(1u, options.max_batch), options.deadline},
      max_batch_bytes_(decoder.max_batch_bytes() ? decoder.max_batch_bytes() : SIZE_MAX),
      on_decoder_error_(std::move(on_decoder_error)) {
  const unsigned n = std::max(1u, decoder_.concurrency());
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

L3Batcher::~L3Batcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  queued_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

Status L3Batcher::decode(std::span<const uint8_t> l3, std::span<uint8_t> pixels) {
  Pending p;
  p.job.l3 = l3;
  p.job.pixels = pixels;
  std::unique_lock lock(mu_);
  if (stop_) return Error{ECANCELED, "the L3 batch decoder is stopping"};
  p.queued = std::chrono::steady_clock::now();
  queue_.push_back(&p);
  // One waiting worker is enough unless a batch is full: then a second one may start the next.
  queued_cv_.notify_one();
  done_cv_.wait(lock, [&] { return p.done; });
  if (p.job.ok) return {};
  return Error{EINVAL, p.job.error.empty() ? "L3 decode failed" : p.job.error};
}

std::pair<size_t, bool> L3Batcher::next_batch() const {
  size_t n = 0, bytes = 0;
  for (const Pending* p : queue_) {
    const size_t b = p->job.l3.size() + p->job.pixels.size();
    if (n == options_.max_batch || (n > 0 && bytes + b > max_batch_bytes_)) return {n, true};
    bytes += b;
    ++n;
  }
  return {n, n == options_.max_batch || bytes >= max_batch_bytes_};
}

void L3Batcher::work() {
  std::unique_lock lock(mu_);
  std::vector<codec::L3Job*> jobs;
  std::vector<Pending*> batch;
  for (;;) {
    queued_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    // With no batch on the decoder, go at once: waiting would leave the device idle. Otherwise
    // wait for a full batch, or until the oldest job's deadline (not at all when stopping).
    const auto due = queue_.front()->queued + options_.deadline;
    while (!stop_ && in_flight_ > 0 && !next_batch().second && std::chrono::steady_clock::now() < due) {
      queued_cv_.wait_until(lock, due);
      if (queue_.empty()) break;  // another worker took them
    }
    if (queue_.empty()) continue;
    const auto [n, full] = next_batch();
    batch.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    if (!queue_.empty()) queued_cv_.notify_one();  // the rest starts the next batch's clock
    ++in_flight_;
    lock.unlock();
    jobs.clear();
    for (Pending* p : batch) jobs.push_back(&p->job);
    const Status decoded = decoder_.decode(jobs);
    const bool fallback = !decoded;
    if (fallback) {
      if (on_decoder_error_) on_decoder_error_(decoded.error().message);
      for (auto* j : jobs) codec::l3_decode_job_on_cpu(*j);
    }
    lock.lock();
    --in_flight_;
    stats_.cpu_fallbacks += fallback ? 1 : 0;
    stats_.jobs += n;
    stats_.batches += 1;
    stats_.full_batches += full ? 1 : 0;
    for (Pending* p : batch) {
      stats_.failed_jobs += p->job.ok ? 0 : 1;
      p->done = true;
    }
    done_cv_.notify_all();
    if (in_flight_ == 0 && !queue_.empty()) queued_cv_.notify_one();  // a waiting worker may go now
  }
}

L3Batcher::Stats L3Batcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace fid::core
