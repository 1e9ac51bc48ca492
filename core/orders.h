// Published read orders: the files /.fidelity/order/epoch-N[.rank-R-of-W], their inode slots,
// their (bounded) generated contents, and the per-order index the prefetcher follows.
// The order itself is index::epoch_order (docs/FORMAT.md "Published read orders").
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/display_names.h"
#include "index/order.h"
#include "index/store.h"

namespace fid::core {

struct OrderName {
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world = 1;  // 1: the whole order ("epoch-N")
  bool operator==(const OrderName&) const = default;
};

// "epoch-N" or "epoch-N.rank-R-of-W" with canonical decimals (no sign, no leading zeros),
// N < 2^64, 1 <= W < 2^32, R < W. Anything else is nullopt (ENOENT).
std::optional<OrderName> parse_order_name(std::string_view name);
std::string order_file_name(const OrderName& n);

// A bounded table of inode slots for order files. A slot holds one name under one seed, so its
// content never changes: after a seed change the name gets another slot (a new inode) while a
// reader of the old one goes on reading the order it started. A (name, seed) keeps its slot
// while it is in the table; when the table is full the least recently used slot is reused and its
// generation bumped, so the kernel sees a new inode (order entries are looked up with timeout 0).
class OrderSlots {
 public:
  struct Held {
    OrderName name;
    uint64_t seed;
    bool operator==(const Held&) const = default;
  };
  explicit OrderSlots(uint32_t slots);
  uint32_t size() const { return static_cast<uint32_t>(names_.size()); }
  // Slot of `held` (an existing one or a fresh/reused one) and its generation.
  uint32_t acquire(const Held& held, uint64_t* generation);
  // What `slot` holds, nullopt if unused or out of range.
  std::optional<Held> held(uint32_t slot) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::optional<Held>> names_;
  std::vector<uint64_t> generation_, last_use_;
  uint64_t clock_ = 0;
};

// Generated order contents (one relative path per line, escaped as docs/FORMAT.md says), keyed by
// the order's parameters. Keeps the last `max_entries` (a getattr needs the size, an open the
// bytes: both hit the same entry).
class OrderContents {
 public:
  // `display_names` (may be null): names that differ from the stored ones (raw_names=ext).
  OrderContents(const index::Store& store, size_t max_entries,
                const DisplayNames* display_names = nullptr);
  std::shared_ptr<const std::string> get(const index::OrderParams& order);
  // How many texts are kept (at most max_entries, however many names readers try).
  size_t cached();

 private:
  struct Entry {
    index::OrderParams order;
    std::shared_ptr<const std::string> text;
  };
  const index::Store& store_;
  size_t max_;
  const DisplayNames* display_names_;
  std::mutex mu_;
  std::list<Entry> lru_;  // front = most recent
  std::vector<std::string> dir_path_;  // "cls/" per directory, escaped ("" for the root)
};

// The order files of a mount: their slots, their contents under the current seed (the store's,
// the config's order_seed, or user.fidelity.order_seed set on the root), and how many readers
// took one.
class OrderFiles {
 public:
  OrderFiles(const index::Store& store, uint64_t seed, uint32_t window, index::RankDeal deal,
             const DisplayNames* display_names);

  uint32_t slots() const { return slots_.size(); }
  // The slot of `name` under the current seed.
  uint32_t acquire(const OrderName& name, uint64_t* generation) { return slots_.acquire({name, seed_.load()}, generation); }
  std::optional<OrderSlots::Held> held(uint32_t slot) const { return slots_.held(slot); }
  // The parameters of the order in `slot` (its name, the seed it was looked up with, the mount's
  // window and deal): the one place they are built, for its text, the prefetcher and the ranks'
  // share. nullopt if the slot is unused.
  std::optional<index::OrderParams> params(uint32_t slot) const;
  // The text of the order in `slot` (under the seed it was looked up with); null if unused.
  std::shared_ptr<const std::string> text(uint32_t slot);
  uint64_t seed() const { return seed_.load(); }
  // Returns false if the seed was already `seed`.
  bool set_seed(uint64_t seed);
  // Back to the seed the mount started with; false if it was that already.
  bool reset_seed() { return set_seed(configured_seed_); }
  void note_open() { opens_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t opens() const { return opens_.load(); }
  uint32_t window() const { return window_; }
  index::RankDeal deal() const { return deal_; }

 private:
  OrderSlots slots_;
  OrderContents contents_;
  const uint64_t configured_seed_;
  std::atomic<uint64_t> seed_;
  const uint32_t window_;
  const index::RankDeal deal_;
  std::atomic<uint64_t> opens_{0};
};

// What the prefetcher needs to follow the orders of an epoch and world size: every file's
// position and each record's first/last position in the ranks' orders (without their padding)
// laid end to end, rank 0 first. A rank reads whole records of its own, so its records form
// one segment of rec_seq; world 1 is one segment, the whole order.
struct OrderIndex {
  uint64_t seed = 0, epoch = 0;
  uint32_t world = 1;
  index::RankDeal deal = index::RankDeal::stable;
  std::vector<uint32_t> pos;        // file id -> position
  std::vector<uint32_t> rec_seq;    // records in order of first use
  std::vector<uint32_t> rec_index;  // record -> index in rec_seq
  std::vector<uint32_t> last_pos;   // by rec_seq index
  std::vector<uint32_t> seg_end;    // by rec_seq index: one past the last index of its rank's segment
};
// The index of every rank of `order.world` (order.rank is ignored).
std::shared_ptr<const OrderIndex> build_order_index(const index::Store& store, const index::OrderParams& order);
// The index's deal of a mount's order_ranks setting.
index::RankDeal rank_deal(config::OrderRanks ranks);

}  // namespace fid::core
