// RecordSource decorators for tests: one counts what is asked of the source it wraps (reads and
// bytes, prefixes and ranges apart), one holds prefix reads until the test opens a gate.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "storage/record_source.h"

namespace fid::testutil {

class CountingSource final : public storage::RecordSource {
 public:
  explicit CountingSource(storage::RecordSource& inner) : inner_(inner) {}
  void read_ranges(std::span<storage::RangeRead> batch, Done done) override {
    for (const auto& r : batch) {
      ranges.fetch_add(1);
      range_bytes.fetch_add(r.dst.size());
    }
    inner_.read_ranges(batch, std::move(done));
  }
  void read_prefixes(std::span<storage::PrefixRead> batch, Done done) override {
    for (const auto& p : batch) {
      prefixes.fetch_add(1);
      prefix_bytes.fetch_add(p.len);
    }
    inner_.read_prefixes(batch, std::move(done));
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "counting " + inner_.describe(); }
  bool pieces_while_loading() const override { return inner_.pieces_while_loading(); }
  using storage::RecordSource::read_prefix;
  using storage::RecordSource::read_ranges;

  uint64_t bytes() const { return range_bytes.load() + prefix_bytes.load(); }
  std::atomic<uint64_t> ranges{0}, range_bytes{0}, prefixes{0}, prefix_bytes{0};

 private:
  storage::RecordSource& inner_;
};

// A source whose prefix reads wait until the test opens the gate: a slow remote read, or with
// local = true a long read from a local disk.
class GatedSource final : public storage::RecordSource {
 public:
  explicit GatedSource(storage::RecordSource& inner, bool local = false) : inner_(inner), local_(local) {}
  bool pieces_while_loading() const override { return local_; }
  void read_ranges(std::span<storage::RangeRead> batch, Done done) override { inner_.read_ranges(batch, std::move(done)); }
  void read_prefixes(std::span<storage::PrefixRead> batch, Done done) override {
    {
      std::unique_lock lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    inner_.read_prefixes(batch, std::move(done));
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "gated"; }
  void wait_for_reader() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  storage::RecordSource& inner_;
  const bool local_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

}  // namespace fid::testutil
