#include "index/order.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace fid::index {

namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kGamma);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (Lemire's multiply-shift).
  uint32_t below(uint32_t n) {
    __extension__ typedef unsigned __int128 u128;
    return static_cast<uint32_t>((static_cast<u128>(next()) * n) >> 64);
  }
};

// What every order of an epoch starts from: each record's files in slot order, the records
// shuffled, and the generator as the shuffle left it.
struct EpochStart {
  std::vector<std::vector<uint32_t>> members;  // record -> file ids in slot order
  std::vector<uint32_t> records;               // all record ids, shuffled
  SplitMix64 rng;
};

EpochStart start_epoch(const Store& store, uint64_t seed, uint64_t epoch) {
  const auto files = store.files();
  const auto nrec = static_cast<uint32_t>(store.records().size());
  EpochStart s{std::vector<std::vector<uint32_t>>(nrec), std::vector<uint32_t>(nrec),
               SplitMix64{seed ^ (0xD1B54A32D192ED03ull * (epoch + 1))}};
  for (const File& f : files) s.members[f.record].push_back(f.id);
  for (auto& m : s.members)
    std::sort(m.begin(), m.end(), [&](uint32_t a, uint32_t b) { return files[a].slot < files[b].slot; });
  for (uint32_t i = 0; i < nrec; ++i) s.records[i] = i;
  for (uint32_t i = nrec; i > 1; --i) std::swap(s.records[i - 1], s.records[s.rng.below(i)]);
  return s;
}

// Files drawn uniformly from the not-yet-drawn files of a window of `window` records taken from
// `records` in turn (empty ones skipped), the next joining when one runs out.
std::vector<uint32_t> draw(const Store& store, const EpochStart& s, const std::vector<uint32_t>& records,
                           uint32_t window, SplitMix64& rng) {
  const auto files = store.files();
  std::vector<uint32_t> order;
  std::vector<uint32_t> pool;  // not-yet-drawn files of the active records
  size_t next_rec = 0;
  uint32_t active = 0;
  std::vector<uint32_t> remaining(s.members.size(), 0);
  auto admit = [&] {
    while (active < window && next_rec < records.size()) {
      const uint32_t r = records[next_rec++];
      if (s.members[r].empty()) continue;
      pool.insert(pool.end(), s.members[r].begin(), s.members[r].end());
      remaining[r] = static_cast<uint32_t>(s.members[r].size());
      ++active;
    }
  };
  admit();
  while (!pool.empty()) {
    const uint32_t i = rng.below(static_cast<uint32_t>(pool.size()));
    const uint32_t id = pool[i];
    pool[i] = pool.back();
    pool.pop_back();
    order.push_back(id);
    if (--remaining[files[id].record] == 0) {
      --active;
      admit();
    }
  }
  return order;
}

// The deal of an epoch's records to the ranks of `world`.
struct Deal {
  std::vector<std::vector<uint32_t>> records;  // rank -> its records in shuffled order
  uint64_t longest = 0;                        // the most files any rank got
};

// Each non-empty record, in shuffled order, goes to the rank with the fewest files so far (ties:
// the lowest rank). Ranks that got nothing (more ranks than records) are left out: they are
// exactly the ranks from records.size() on, since an empty rank wins every tie it is in.
Deal deal(const EpochStart& s, uint32_t world) {
  Deal d;
  using Load = std::pair<uint64_t, uint32_t>;  // (files so far, rank)
  std::priority_queue<Load, std::vector<Load>, std::greater<>> loads;
  for (uint32_t r : s.records) {
    const uint64_t n = s.members[r].size();
    if (n == 0) continue;
    if (d.records.size() < world) {  // a rank with no files yet: the lowest such one
      loads.emplace(n, static_cast<uint32_t>(d.records.size()));
      d.records.push_back({r});
      continue;
    }
    auto [load, rank] = loads.top();
    loads.pop();
    loads.emplace(load + n, rank);
    d.records[rank].push_back(r);
  }
  for (; !loads.empty(); loads.pop()) d.longest = std::max(d.longest, loads.top().first);
  return d;
}

// Rank r's own generator, independent of the other ranks' draws: seeded with the (r+1)-th value
// the epoch's generator would return after the shuffle.
SplitMix64 rank_rng(const EpochStart& s, uint32_t rank) {
  SplitMix64 jump{s.rng.state + kGamma * rank};
  return SplitMix64{jump.next()};
}

}  // namespace

std::vector<std::vector<uint32_t>> epoch_rank_orders(const Store& store, const OrderParams& p) {
  EpochStart s = start_epoch(store, p.seed, p.epoch);
  const uint32_t window = std::max<uint32_t>(1, p.window);
  if (p.world <= 1) return {draw(store, s, s.records, window, s.rng)};
  Deal d = deal(s, p.world);
  std::vector<std::vector<uint32_t>> orders;
  orders.reserve(d.records.size());
  for (uint32_t r = 0; r < d.records.size(); ++r) {
    SplitMix64 rng = rank_rng(s, r);
    orders.push_back(draw(store, s, d.records[r], window, rng));
  }
  return orders;
}

std::vector<uint32_t> epoch_order(const Store& store, const OrderParams& p) {
  EpochStart s = start_epoch(store, p.seed, p.epoch);
  const uint32_t window = std::max<uint32_t>(1, p.window);
  if (p.world <= 1) return draw(store, s, s.records, window, s.rng);
  Deal d = deal(s, p.world);
  if (d.records.empty()) return {};  // no files at all
  // A rank without records of its own (more ranks than records) repeats another's order.
  const auto own = static_cast<uint32_t>(p.rank < d.records.size() ? p.rank : p.rank % d.records.size());
  SplitMix64 rng = rank_rng(s, own);
  std::vector<uint32_t> order = draw(store, s, d.records[own], window, rng);
  // Every rank as long as the longest: the tail of the rank's own order repeated end to end,
  // i.e. entry j >= n is order[(j - L) mod n] (records already read, no other rank's).
  const uint64_t n = order.size(), len = d.longest;
  order.reserve(len);
  for (uint64_t j = n; j < len; ++j) order.push_back(order[((j % n) + n - len % n) % n]);
  return order;
}

}  // namespace fid::index
