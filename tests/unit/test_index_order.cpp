// Published orders (index/order.h): epoch orders, the ranks' shares of the records (stable and
// per-epoch deals) against docs/FORMAT.md's reference, and the window of open records.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "index/order.h"
#include "index/store.h"
#include "test_files.h"
#include "test_pack_tree.h"

using fid::index::RankDeal;
using fid::index::Store;
using fid::testutil::TempDir;
using fid::testutil::make_tree;
using fid::testutil::open_store;
using fid::testutil::pack;

namespace {

std::unique_ptr<Store> order_store(TempDir& t) {
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 4096);
  return open_store(t.path() / "store");
}

}  // namespace

TEST(EpochOrder, IsAPermutationDeterministicAndChangesWithEpochAndSeed) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p;
  auto a = fid::index::epoch_order(*s, p);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted.size(), s->files().size());
  for (uint32_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(a, fid::index::epoch_order(*s, p));
  p.epoch = 1;
  EXPECT_NE(a, fid::index::epoch_order(*s, p));
  p.epoch = 0;
  p.seed = 7;
  EXPECT_NE(a, fid::index::epoch_order(*s, p));
}

// World 1 is the order it was before ranks were dealt whole records (users rely on it): file ids
// of order_store's store computed with that implementation.
TEST(EpochOrder, WorldOneIsUnchanged) {
  TempDir t;
  auto s = order_store(t);
  ASSERT_EQ(s->files().size(), 42u);
  ASSERT_EQ(s->records().size(), 36u);
  fid::index::OrderParams p;
  p.epoch = 3;
  EXPECT_EQ(fid::index::epoch_order(*s, p),
            (std::vector<uint32_t>{36, 4,  10, 5,  6,  1,  29, 41, 34, 9,  38, 16, 22, 27, 0,  2,  23, 13, 21, 18, 31,
                                   3,  32, 7,  39, 20, 30, 17, 33, 11, 14, 26, 37, 25, 12, 35, 28, 40, 8,  19, 15, 24}));
  p.rank = 0;
  p.world = 1;
  p.seed = 7;
  p.window = 2;
  const std::vector<uint32_t> seeded{4,  3,  30, 20, 23, 14, 10, 35, 36, 29, 28, 39, 40, 13, 33, 27, 19, 16, 12, 17, 9,
                                     37, 38, 18, 31, 25, 26, 11, 2,  21, 0,  6,  32, 7,  5,  34, 15, 8,  24, 22, 1,  41};
  EXPECT_EQ(fid::index::epoch_order(*s, p), seeded);
  EXPECT_EQ(fid::index::epoch_rank_orders(*s, p), std::vector<std::vector<uint32_t>>{seeded});
}

namespace {

// Checks the rank orders of `world` against the rules of docs/FORMAT.md: each non-empty record
// in exactly one rank, ranks disjoint and together complete before padding, equal lengths,
// padding = the rank's own order's tail repeated, and epoch_rank_orders agreeing.
void check_rank_split(const Store& s, fid::index::OrderParams p) {
  const auto files = s.files();
  const auto unpadded = fid::index::epoch_rank_orders(s, p);
  std::vector<int> owner(s.records().size(), -1);
  std::vector<uint32_t> seen;
  size_t longest = 0;
  for (uint32_t r = 0; r < p.world; ++r) {
    p.rank = r;
    const auto order = fid::index::epoch_order(s, p);
    EXPECT_EQ(order, fid::index::epoch_order(s, p)) << "deterministic";
    if (r == 0) longest = order.size();
    EXPECT_EQ(order.size(), longest) << "rank " << r << " of " << p.world << ": equal lengths";
    if (r >= unpadded.size()) {  // no records of its own: another rank's order, padded
      EXPECT_EQ(order, fid::index::epoch_order(s, {p.seed, p.epoch, static_cast<uint32_t>(r % unpadded.size()),
                                                   p.world, p.window, p.ranks}));
      continue;
    }
    const auto& own = unpadded[r];
    ASSERT_FALSE(own.empty());
    ASSERT_LE(own.size(), order.size());
    EXPECT_TRUE(std::equal(own.begin(), own.end(), order.begin())) << "rank " << r << ": own order first";
    // Padding: the own order's last entries, repeated end to end, ending with its last entry.
    const size_t n = own.size(), len = order.size();
    for (size_t j = n; j < len; ++j) EXPECT_EQ(order[j], own[(j + n * len - len) % n]) << "rank " << r << " pad " << j;
    for (uint32_t id : own) {
      const uint32_t rec = files[id].record;
      EXPECT_TRUE(owner[rec] == -1 || owner[rec] == static_cast<int>(r)) << "record " << rec << " in two ranks";
      owner[rec] = static_cast<int>(r);
    }
    for (size_t j = n; j < len; ++j) {
      EXPECT_EQ(owner[files[order[j]].record], static_cast<int>(r)) << "padding reads only records of the rank";
    }
    seen.insert(seen.end(), own.begin(), own.end());
  }
  // Disjoint and complete before padding.
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), files.size());
  for (uint32_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
  // Every record with files belongs to exactly one rank (set above), and the deal kept the ranks
  // within one record of each other: the padding is shorter than the largest record.
  std::vector<size_t> per_record(s.records().size(), 0);
  for (const auto& f : files) per_record[f.record]++;
  const size_t biggest = *std::max_element(per_record.begin(), per_record.end());
  for (size_t rec = 0; rec < per_record.size(); ++rec) EXPECT_EQ(per_record[rec] > 0, owner[rec] >= 0) << rec;
  for (const auto& own : unpadded) EXPECT_LE(longest - own.size(), biggest);
}

// The reference deal of docs/FORMAT.md: record file counts in the order the records reach the
// deal; returns each rank's file count.
std::vector<size_t> reference_deal_counts(const std::vector<size_t>& record_files, uint32_t world) {
  std::vector<size_t> load(world, 0);
  for (size_t n : record_files) {
    if (n == 0) continue;
    size_t best = 0;
    for (size_t r = 1; r < world; ++r)
      if (load[r] < load[best]) best = r;
    load[best] += n;
  }
  return load;
}

}  // namespace

TEST(EpochOrder, RanksGetWholeRecordsDisjointCompleteAndEqualLengths) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p;
  p.epoch = 3;
  for (RankDeal deal : {RankDeal::stable, RankDeal::per_epoch}) {
    p.ranks = deal;
    for (uint32_t world : {2u, 3u, 7u, 36u, 50u}) {  // 50: more ranks than records
      p.world = world;
      SCOPED_TRACE(testing::Message() << "world " << world << " per-epoch " << (deal == RankDeal::per_epoch));
      check_rank_split(*s, p);
    }
  }
}

TEST(EpochOrder, RanksOfBigRecordsArePaddedWithTheirOwnFiles) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);  // several files per record
  auto s = open_store(t.path() / "store");
  std::vector<size_t> per_record(s->records().size(), 0);
  for (const auto& f : s->files()) per_record[f.record]++;
  ASSERT_GT(*std::max_element(per_record.begin(), per_record.end()), 2u);
  bool padded = false;
  for (uint32_t window : {1u, 4u}) {
    for (uint64_t epoch : {0u, 1u, 2u}) {
      for (uint32_t world : {2u, 3u, 4u}) {
        for (RankDeal deal : {RankDeal::stable, RankDeal::per_epoch}) {
        fid::index::OrderParams p{5, epoch, 0, world, window, deal};
        SCOPED_TRACE(testing::Message() << "epoch " << epoch << " world " << world << " window " << window);
        check_rank_split(*s, p);
        const auto unpadded = fid::index::epoch_rank_orders(*s, p);
        for (size_t r = 0; r < unpadded.size(); ++r) padded |= unpadded[r].size() != unpadded[0].size();
        }
      }
    }
  }
  EXPECT_TRUE(padded) << "no case needed padding: the fixture tests nothing";
}

TEST(EpochOrder, PerEpochDealGoesToTheRankWithFewestFilesAndRanksDrawIndependently) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);
  auto s = open_store(t.path() / "store");
  const auto files = s->files();
  fid::index::OrderParams p{11, 4, 0, 3, 4, RankDeal::per_epoch};
  const auto orders = fid::index::epoch_rank_orders(*s, p);
  ASSERT_EQ(orders.size(), 3u);
  // The records in the order they reached the deal: the world-1 order's records by first use
  // are the shuffled list (window 1 takes them one at a time).
  fid::index::OrderParams one = p;
  one.world = 1;
  one.window = 1;
  one.ranks = RankDeal::stable;  // world 1 is the same under both deals
  std::vector<size_t> record_files;
  std::vector<int> used(s->records().size(), 0);
  for (const auto& f : files) used[f.record]++;
  std::vector<bool> first(s->records().size(), true);
  for (uint32_t id : fid::index::epoch_order(*s, one)) {
    const uint32_t rec = files[id].record;
    if (first[rec]) record_files.push_back(static_cast<size_t>(used[rec]));
    first[rec] = false;
  }
  const auto load = reference_deal_counts(record_files, 3);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(orders[r].size(), load[r]) << r;
  // A rank's order depends on its own records and generator only: the same for world 3 as
  // computed alone (epoch_order of that rank, before its padding).
  for (uint32_t r = 0; r < 3; ++r) {
    p.rank = r;
    auto alone = fid::index::epoch_order(*s, p);
    alone.resize(orders[r].size());
    EXPECT_EQ(alone, orders[r]);
  }
  // Seed and epoch change the split.
  fid::index::OrderParams other = p;
  other.epoch = 5;
  EXPECT_NE(fid::index::epoch_rank_orders(*s, other), orders);
}

namespace {

// SplitMix64 and Fisher-Yates as docs/FORMAT.md writes them, apart from the implementation.
struct RefRng {
  uint64_t state;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t next() { return mix(state += 0x9E3779B97F4A7C15ull); }
  uint32_t below(uint32_t n) {
    __extension__ typedef unsigned __int128 u128;
    return static_cast<uint32_t>((static_cast<u128>(next()) * n) >> 64);
  }
};

}  // namespace

// order_ranks=stable: a rank's records depend on the store, the seed and the world size only;
// each epoch reorders them. The deal follows docs/FORMAT.md step 3.1 (the seed's own shuffle).
TEST(EpochOrder, StableDealKeepsEachRanksRecordsForEveryEpoch) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);
  auto s = open_store(t.path() / "store");
  const auto files = s->files();
  std::vector<size_t> per_record(s->records().size(), 0);
  for (const auto& f : files) per_record[f.record]++;
  for (uint32_t world : {2u, 3u, 5u}) {
    SCOPED_TRACE(world);
    fid::index::OrderParams p{11, 0, 0, world, 4, RankDeal::stable};
    const auto dealt = fid::index::rank_records(*s, p);
    std::vector<std::set<uint32_t>> own_records;
    std::vector<std::vector<uint32_t>> first_orders;
    for (uint64_t epoch : {0u, 1u, 7u}) {
      p.epoch = epoch;
      EXPECT_EQ(fid::index::rank_records(*s, p).size(), dealt.size());
      const auto orders = fid::index::epoch_rank_orders(*s, p);
      ASSERT_EQ(orders.size(), dealt.size());
      for (size_t r = 0; r < orders.size(); ++r) {
        std::set<uint32_t> recs;
        for (uint32_t id : orders[r]) recs.insert(files[id].record);
        EXPECT_EQ(recs, std::set<uint32_t>(dealt[r].begin(), dealt[r].end())) << "rank " << r << " epoch " << epoch;
        if (epoch == 0) {
          own_records.push_back(recs);
          first_orders.push_back(orders[r]);
        } else if (orders[r].size() > 2) {
          EXPECT_NE(orders[r], first_orders[r]) << "rank " << r << ": the same order in epochs 0 and " << epoch;
        }
      }
    }
    // The reference deal: record ids shuffled with SplitMix64(seed ^ 0x9FB21C651E98DF25), dealt
    // to the rank with the fewest files (ties: the lowest).
    RefRng d{11 ^ 0x9FB21C651E98DF25ull};
    std::vector<uint32_t> recs(s->records().size());
    for (uint32_t i = 0; i < recs.size(); ++i) recs[i] = i;
    for (auto i = static_cast<uint32_t>(recs.size()); i > 1; --i) std::swap(recs[i - 1], recs[d.below(i)]);
    std::vector<size_t> load(world, 0);
    std::vector<std::set<uint32_t>> expect(world);
    for (uint32_t r : recs) {
      if (per_record[r] == 0) continue;
      size_t best = 0;
      for (size_t k = 1; k < world; ++k)
        if (load[k] < load[best]) best = k;
      load[best] += per_record[r];
      expect[best].insert(r);
    }
    for (size_t r = 0; r < dealt.size(); ++r) EXPECT_EQ(own_records[r], expect[r]) << "rank " << r;
  }
  // Only the seed changes the deal.
  fid::index::OrderParams a{11, 0, 0, 3, 4, RankDeal::stable}, b{12, 0, 0, 3, 4, RankDeal::stable};
  EXPECT_NE(fid::index::rank_records(*s, a), fid::index::rank_records(*s, b));
  // Per-epoch dealing changes the records with the epoch.
  fid::index::OrderParams e0{11, 0, 0, 3, 4, RankDeal::per_epoch}, e1{11, 1, 0, 3, 4, RankDeal::per_epoch};
  EXPECT_NE(fid::index::rank_records(*s, e0), fid::index::rank_records(*s, e1));
}

namespace {

// Every rank's own order under the stable deal, written from docs/FORMAT.md steps 1 and 3
// (not from the implementation): the seed's shuffle of the records dealt to the ranks, then per
// rank its records shuffled and drawn with G_r.
std::vector<std::vector<uint32_t>> reference_stable_orders(const Store& s, uint64_t seed, uint64_t epoch,
                                                            uint32_t world, uint32_t window) {
  const auto files = s.files();
  std::vector<std::vector<uint32_t>> members(s.records().size());
  for (const auto& f : files) members[f.record].push_back(f.id);
  for (auto& m : members) std::sort(m.begin(), m.end(), [&](uint32_t x, uint32_t y) { return files[x].slot < files[y].slot; });
  auto shuffle = [](std::vector<uint32_t>& v, RefRng& g) {
    for (auto i = static_cast<uint32_t>(v.size()); i > 1; --i) std::swap(v[i - 1], v[g.below(i)]);
  };
  RefRng d{seed ^ 0x9FB21C651E98DF25ull};
  std::vector<uint32_t> recs(s.records().size());
  for (uint32_t i = 0; i < recs.size(); ++i) recs[i] = i;
  shuffle(recs, d);
  std::vector<std::vector<uint32_t>> dealt;
  std::vector<size_t> load;
  for (uint32_t r : recs) {
    if (members[r].empty()) continue;
    if (dealt.size() < world) {
      dealt.push_back({r});
      load.push_back(members[r].size());
      continue;
    }
    size_t best = 0;
    for (size_t k = 1; k < world; ++k)
      if (load[k] < load[best]) best = k;
    dealt[best].push_back(r);
    load[best] += members[r].size();
  }
  const uint64_t s0 = seed ^ (0xD1B54A32D192ED03ull * (epoch + 1));
  std::vector<std::vector<uint32_t>> orders;
  for (uint32_t r = 0; r < dealt.size(); ++r) {
    RefRng g{RefRng::mix(s0 + (r + 1) * 0x9E3779B97F4A7C15ull)};
    std::vector<uint32_t> list = dealt[r];
    shuffle(list, g);
    std::vector<uint32_t> pool, order;
    size_t next = 0;
    uint32_t active = 0;
    std::vector<uint32_t> left(members.size(), 0);
    auto admit = [&] {
      while (active < window && next < list.size()) {
        const uint32_t rec = list[next++];
        pool.insert(pool.end(), members[rec].begin(), members[rec].end());
        left[rec] = static_cast<uint32_t>(members[rec].size());
        ++active;
      }
    };
    admit();
    while (!pool.empty()) {
      const uint32_t i = g.below(static_cast<uint32_t>(pool.size()));
      const uint32_t id = pool[i];
      pool[i] = pool.back();
      pool.pop_back();
      order.push_back(id);
      if (--left[files[id].record] == 0) {
        --active;
        admit();
      }
    }
    orders.push_back(order);
  }
  return orders;
}

}  // namespace

TEST(EpochOrder, StableRankOrdersFollowTheFormat) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);  // several files per record
  auto s = open_store(t.path() / "store");
  for (uint32_t world : {2u, 3u, 4u}) {
    for (uint64_t epoch : {0u, 3u}) {
      for (uint32_t window : {1u, 2u}) {
        fid::index::OrderParams p{7, epoch, 0, world, window, RankDeal::stable};
        SCOPED_TRACE(testing::Message() << "world " << world << " epoch " << epoch << " window " << window);
        EXPECT_EQ(fid::index::epoch_rank_orders(*s, p), reference_stable_orders(*s, 7, epoch, world, window));
      }
    }
  }
}

// A golden value of the stable deal (order_store's store, seed 7, epoch 3, rank 1 of 4, window
// 2), so that any change of the algorithm shows here and in docs/FORMAT.md.
TEST(EpochOrder, StableRankOrderGolden) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p{7, 3, 1, 4, 2, RankDeal::stable};
  EXPECT_EQ(fid::index::epoch_order(*s, p), (std::vector<uint32_t>{41, 1, 32, 35, 7, 27, 11, 39, 25, 9, 9}));
}

TEST(EpochOrder, NeverHasMoreThanWindowRecordsOpen) {
  TempDir t;
  auto s = order_store(t);
  ASSERT_GT(s->records().size(), 5u);
  for (uint32_t window : {1u, 2u, 4u}) {
    fid::index::OrderParams p;
    p.window = window;
    auto order = fid::index::epoch_order(*s, p);
    std::vector<uint32_t> left(s->records().size(), 0);
    for (const auto& f : s->files()) left[f.record]++;
    std::vector<bool> opened(left.size(), false);
    uint32_t open = 0;
    for (uint32_t id : order) {
      uint32_t r = s->files()[id].record;
      if (!opened[r]) {
        opened[r] = true;
        ++open;
      }
      EXPECT_LE(open, window);
      if (--left[r] == 0) --open;
    }
  }
}
