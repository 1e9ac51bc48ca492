// A store's records on a local filesystem. Reads with O_DIRECT where the filesystem supports it:
// a small read then costs its own bytes rounded to 512-byte sectors (not 4 KiB pages plus
// readahead), and a cached prefix is not kept twice (page cache + the record cache). Falls back
// to buffered reads. The ranges of one batch are read concurrently through io_uring (one ring
// per thread) when the kernel allows it, else one pread after another; either way the batch has
// completed when read_ranges returns.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/fd.h"
#include "index/store.h"
#include "storage/record_source.h"

struct io_uring;
struct io_uring_cqe;

namespace fid::storage {

class LocalRecordSource final : public RecordSource {
 public:
  // Opens every record file of `store` and checks its size and header; a record that fails goes
  // to problems() and its reads fail with EIO. use_io_uring = false forces sequential preads;
  // direct = false reads through the page cache (whole records read once in order, as relayout
  // does, go faster with its readahead than with O_DIRECT).
  explicit LocalRecordSource(const index::Store& store, bool use_io_uring = true, bool direct = true);
  ~LocalRecordSource() override;
  LocalRecordSource(const LocalRecordSource&) = delete;
  LocalRecordSource& operator=(const LocalRecordSource&) = delete;

  void read_ranges(std::span<RangeRead> batch, Done done) override;
  void read_prefixes(std::span<PrefixRead> batch, Done done) override;
  // Read with O_DIRECT straight into the thread's bounce buffer, where the range is then served.
  Result<std::span<const uint8_t>> read_scratch(uint32_t record, uint64_t offset, uint64_t len) override;
  const std::vector<std::string>& problems() const override { return problems_; }
  bool pieces_while_loading() const override { return true; }
  std::string describe() const override;
  using RecordSource::read_prefix;
  using RecordSource::read_ranges;

  bool uses_io_uring() const { return uring_; }
  // Tests only: stand in for liburing's io_uring_wait_cqe (a ring failing mid-batch) and
  // io_uring_submit (a submit refused) in the ring's reads.
  static inline int (*ring_wait_for_tests)(io_uring* ring, io_uring_cqe** cqe) = nullptr;
  static inline int (*ring_submit_for_tests)(io_uring* ring) = nullptr;
  // Whether this kernel/process can set up an io_uring (probed once per process); the error
  // says why not (e.g. "Operation not permitted").
  static Status io_uring_available();

 private:
  struct Span;
  // The O_DIRECT reads of a batch, each in its slot of the thread's bounce buffer.
  void plan_direct(std::span<const RangeRead> batch, std::vector<Span>& spans);
  // Completes one O_DIRECT read; false if the range has to be read buffered instead.
  bool finish_direct(const Span& s, int res, RangeRead& r);
  // The bytes of span s read for record r, from the ring's completion `res`.
  Result<uint64_t> direct_result(const Span& s, int res, uint32_t r);
  std::string_view path_of(uint32_t r) const;
  int direct_fd(uint32_t r);
  void drop_direct(uint32_t r, int fd);
  Status read_buffered(const RangeRead& r);
  Status read_one_prefix(const PrefixRead& p);
  Error error(uint32_t r, int code, std::string_view what) const;

  const index::Store& store_;
  const bool uring_;
  std::vector<Fd> fds_;  // buffered descriptor per record, -1: unreadable
  // O_DIRECT descriptor per record, opened on first use by any thread: -2 not opened yet, -1
  // none. The slots own them (lock-free, hence raw) and the destructor closes them; one that
  // drop_direct takes out moves to dropped_, open until then.
  std::unique_ptr<std::atomic<int>[]> dfd_;
  std::mutex dropped_mu_;
  std::vector<Fd> dropped_;
  std::vector<std::string> problems_;
};

}  // namespace fid::storage
