// A store's records on an S3-compatible object store (SigV4-signed GETs) or a plain HTTP(S)
// server (unsigned GETs with Range), read through one HttpClient. Every range of a batch is its
// own Range request and all of them are issued at once (a file's pieces arrive together); a
// prefix larger than kPartSize is fetched as parts of at least kPartSize in parallel, each
// written straight into its place in the destination.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "index/store.h"
#include "net/http_client.h"
#include "net/remote_location.h"
#include "storage/record_source.h"

namespace fid::storage {

class HttpRecordSource final : public RecordSource {
 public:
  static constexpr uint64_t kPartSize = 8ull << 20;

  // `store` must outlive the source. `opts.counters` is replaced by this source's counters.
  // `part_size` other than kPartSize is for tests (parts of small records).
  HttpRecordSource(const index::Store& store, net::RemoteLocation where, net::HttpOptions opts, uint64_t part_size = kPartSize);

  void read_ranges(std::span<RangeRead> batch, Done done) override;
  void read_prefixes(std::span<PrefixRead> batch, Done done) override;
  // Missing and short records refuse the open (open_remote_store), so there are none here.
  const std::vector<std::string>& problems() const override { return problems_; }
  std::string describe() const override;
  uint64_t in_flight_target() const override { return client_.bandwidth_delay_bytes(); }
  void cancel_on(const std::atomic<bool>* flag) override { cancel_.store(flag); }
  using RecordSource::read_prefix;
  using RecordSource::read_ranges;

  // The parts (offset, length) a prefix of `len` bytes is fetched in: floor(len / part_size)
  // parts (at least one) of nearly equal size, so each is at least part_size (a request that
  // large costs little more than its latency) and smaller than 2 * part_size.
  static std::vector<std::pair<uint64_t, uint64_t>> prefix_parts(uint64_t len, uint64_t part_size = kPartSize);

 private:
  net::HttpOptions with_counters(net::HttpOptions opts);
  // A ranged GET of `dst.size()` bytes of record r at `offset`; `done` gets its status.
  void get(uint32_t record, uint64_t offset, std::span<uint8_t> dst, std::function<void(Status)> done);

  const index::Store& store_;
  std::atomic<const std::atomic<bool>*> cancel_{nullptr};  // every request's (cancel_on)
  const net::RemoteLocation where_;
  const uint64_t part_size_;
  const std::vector<std::string> problems_;
  net::HttpClient client_;
};

}  // namespace fid::storage
