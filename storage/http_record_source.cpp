#include "storage/http_record_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <memory>

#include "net/s3_requests.h"

namespace fid::storage {

namespace {

// Counts down the requests of one batch; the last one calls the batch's Done.
struct BatchCountdown {
  std::atomic<size_t> pending;
  RecordSource::Done done;
  BatchCountdown(size_t n, RecordSource::Done d) : pending(n), done(std::move(d)) {}
  void one_done() {
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) done();
  }
};

}  // namespace

net::HttpOptions HttpRecordSource::with_counters(net::HttpOptions opts) {
  opts.counters = &counters_;
  return opts;
}

HttpRecordSource::HttpRecordSource(const index::Store& store, net::RemoteLocation where, net::HttpOptions opts, uint64_t part_size)
    : store_(store), where_(std::move(where)), part_size_(std::max<uint64_t>(1, part_size)), client_(with_counters(std::move(opts))) {}

std::string HttpRecordSource::describe() const {
  return fmt::format("{} (remote{}; up to {} requests in flight, prefixes in parallel parts of at least {} KiB)", where_.text,
                     where_.sign ? fmt::format(", signed, credentials from {}", where_.credentials_from) : "",
                     client_.options().max_in_flight, part_size_ >> 10);
}

std::vector<std::pair<uint64_t, uint64_t>> HttpRecordSource::prefix_parts(uint64_t len, uint64_t part_size) {
  if (len < 2 * part_size) return {{0, len}};
  // floor(len / part_size) parts: each at least part_size, the remainder spread over all.
  const uint64_t count = len / part_size;
  const uint64_t base = len / count, extra = len % count;
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  uint64_t at = 0;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t n = base + (k < extra ? 1 : 0);
    parts.emplace_back(at, n);
    at += n;
  }
  return parts;
}

void HttpRecordSource::get(uint32_t record, uint64_t offset, std::span<uint8_t> dst, std::function<void(Status)> done) {
  if (record >= store_.records().size()) {
    done(Error{EIO, fmt::format("{}: no record {} in this store", where_.text, record)});
    return;
  }
  if (dst.empty()) {
    done({});
    return;
  }
  const std::string& path = store_.records()[record].path;
  net::HttpRequest req = net::get_object(where_, path);
  req.ranged = true;
  req.offset = offset;
  req.dst = dst;
  req.cancel = cancel_.load();
  // A file read fails with EIO whatever the storage said; the message keeps the cause.
  req.done = [done = std::move(done)](Status s, const net::HttpResult&) {
    if (!s) done(Error{EIO, std::move(s).error().message});
    else done({});
  };
  client_.submit(std::move(req));
}

void HttpRecordSource::read_ranges(std::span<RangeRead> batch, Done done) {
  if (batch.empty()) {
    done();
    return;
  }
  auto countdown = std::make_shared<BatchCountdown>(batch.size(), std::move(done));
  for (RangeRead& r : batch) {
    get(r.record, r.offset, r.dst, [&r, countdown](Status s) {
      r.status = std::move(s);
      countdown->one_done();
    });
  }
}

void HttpRecordSource::read_prefixes(std::span<PrefixRead> batch, Done done) {
  size_t requests = 0;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> plans;
  plans.reserve(batch.size());
  for (const PrefixRead& p : batch) {
    plans.push_back(prefix_parts(p.len, part_size_));
    requests += plans.back().size();
  }
  if (requests == 0) {
    done();
    return;
  }
  auto countdown = std::make_shared<BatchCountdown>(requests, std::move(done));
  for (size_t i = 0; i < batch.size(); ++i) {
    PrefixRead& p = batch[i];
    p.status = {};
    for (const auto& [offset, len] : plans[i]) {
      // Completions run on the client's one transfer thread, so the parts of a prefix never
      // set its status concurrently; the first failure is kept.
      get(p.record, offset, {p.dst + offset, len}, [&p, countdown](Status s) {
        if (!s && p.status) p.status = std::move(s);
        countdown->one_done();
      });
    }
  }
}

}  // namespace fid::storage
