#include "index/order.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace fid::index {

namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;      // SplitMix64's increment
constexpr uint64_t kEpochKey = 0xD1B54A32D192ED03ull;   // the epoch generator: seed ^ kEpochKey * (epoch + 1)
constexpr uint64_t kDealKey = 0x9FB21C651E98DF25ull;    // the stable deal's generator: seed ^ kDealKey

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

SplitMix64 epoch_rng(uint64_t seed, uint64_t epoch) { return SplitMix64{seed ^ (kEpochKey * (epoch + 1))}; }

// Fisher-Yates, as for the storage order: for i = n..2, swap v[i-1] and v[g.below(i)].
void shuffle(std::vector<uint32_t>& v, SplitMix64& g) {
  for (auto i = static_cast<uint32_t>(v.size()); i > 1; --i) std::swap(v[i - 1], v[g.below(i)]);
}

// Record ids 0..R-1 shuffled with g.
std::vector<uint32_t> shuffled_records(uint32_t nrec, SplitMix64& g) {
  std::vector<uint32_t> records(nrec);
  for (uint32_t i = 0; i < nrec; ++i) records[i] = i;
  shuffle(records, g);
  return records;
}

// Each record's files in slot order.
std::vector<std::vector<uint32_t>> record_members(const Store& store) {
  const auto files = store.files();
  std::vector<std::vector<uint32_t>> members(store.records().size());
  for (const File& f : files) members[f.record].push_back(f.id);
  for (auto& m : members)
    std::sort(m.begin(), m.end(), [&](uint32_t a, uint32_t b) { return files[a].slot < files[b].slot; });
  return members;
}

// Each record's units in slot order, as (first member, members): a clip run, or a file in none.
std::vector<std::vector<std::pair<uint32_t, uint32_t>>> record_units(const Store& store,
                                                                    const std::vector<std::vector<uint32_t>>& members) {
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> units(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    const Record& rec = store.records()[r];
    const auto runs = store.clip_runs().subspan(rec.clip_begin, rec.clip_count);
    size_t next_run = 0;
    for (uint32_t k = 0; k < members[r].size();) {
      const bool run = next_run < runs.size() && runs[next_run].first_slot == k;
      const uint32_t n = run ? runs[next_run++].frames : 1;
      units[r].emplace_back(k, n);
      k += n;
    }
  }
  return units;
}

// Units (files, or clip runs whose frames come out in slot order) drawn uniformly from the
// not-yet-drawn units of a window of `window` records taken from `records` in turn (empty ones
// skipped), the next joining when one runs out.
std::vector<uint32_t> draw(const Store& store, const std::vector<std::vector<uint32_t>>& members,
                           const std::vector<uint32_t>& records, uint32_t window, SplitMix64& rng) {
  const auto units = record_units(store, members);
  std::vector<uint32_t> order;
  std::vector<uint64_t> pool;  // not-yet-drawn units of the active records: record << 32 | unit
  size_t next_rec = 0;
  uint32_t active = 0;
  std::vector<uint32_t> remaining(members.size(), 0);
  auto admit = [&] {
    while (active < window && next_rec < records.size()) {
      const uint32_t r = records[next_rec++];
      if (members[r].empty()) continue;
      for (uint32_t u = 0; u < units[r].size(); ++u) pool.push_back(uint64_t{r} << 32 | u);
      remaining[r] = static_cast<uint32_t>(units[r].size());
      ++active;
    }
  };
  admit();
  while (!pool.empty()) {
    const uint32_t i = rng.below(static_cast<uint32_t>(pool.size()));
    const auto r = static_cast<uint32_t>(pool[i] >> 32);
    const auto [first, n] = units[r][static_cast<uint32_t>(pool[i])];
    pool[i] = pool.back();
    pool.pop_back();
    order.insert(order.end(), members[r].begin() + first, members[r].begin() + first + n);
    if (--remaining[r] == 0) {
      --active;
      admit();
    }
  }
  return order;
}

// The deal of a shuffled list of records to the ranks of `world`.
struct Deal {
  std::vector<std::vector<uint32_t>> records;  // rank -> its records, in the order dealt
  uint64_t longest = 0;                        // the most files any rank got
};

// Each non-empty record, in list order, goes to the rank with the fewest files so far (ties: the
// lowest rank). Ranks that got nothing (more ranks than records) are left out: they are exactly
// the ranks from records.size() on, since an empty rank wins every tie it is in.
Deal deal(const std::vector<std::vector<uint32_t>>& members, const std::vector<uint32_t>& shuffled, uint32_t world) {
  Deal d;
  using Load = std::pair<uint64_t, uint32_t>;  // (files so far, rank)
  std::priority_queue<Load, std::vector<Load>, std::greater<>> loads;
  for (uint32_t r : shuffled) {
    const uint64_t n = members[r].size();
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
// a generator in `state` would return.
SplitMix64 rank_rng(uint64_t state, uint32_t rank) {
  SplitMix64 jump{state + kGamma * rank};
  return SplitMix64{jump.next()};
}

// Every rank's records in the order it draws them, and its generator, ready to draw.
struct RankPlan {
  std::vector<std::vector<uint32_t>> members;
  Deal deal;
  std::vector<SplitMix64> rngs;
};

RankPlan plan_ranks(const Store& store, const OrderParams& p) {
  RankPlan plan{record_members(store), {}, {}};
  const auto nrec = static_cast<uint32_t>(store.records().size());
  SplitMix64 e = epoch_rng(p.seed, p.epoch);
  if (p.ranks == RankDeal::per_epoch) {
    // The epoch's shuffle is dealt; each rank draws its records in dealt order.
    plan.deal = deal(plan.members, shuffled_records(nrec, e), p.world);
    for (uint32_t r = 0; r < plan.deal.records.size(); ++r) plan.rngs.push_back(rank_rng(e.state, r));
    return plan;
  }
  // Stable: one deal for every epoch (from the seed alone); each epoch shuffles each rank's
  // records with the rank's generator, which then draws from them.
  SplitMix64 d{p.seed ^ kDealKey};
  plan.deal = deal(plan.members, shuffled_records(nrec, d), p.world);
  for (uint32_t r = 0; r < plan.deal.records.size(); ++r) {
    SplitMix64 g = rank_rng(e.state, r);
    shuffle(plan.deal.records[r], g);
    plan.rngs.push_back(g);
  }
  return plan;
}

}  // namespace

std::vector<std::vector<uint32_t>> epoch_rank_orders(const Store& store, const OrderParams& p) {
  const uint32_t window = std::max<uint32_t>(1, p.window);
  if (p.world <= 1) {
    const auto members = record_members(store);
    SplitMix64 e = epoch_rng(p.seed, p.epoch);
    const auto records = shuffled_records(static_cast<uint32_t>(members.size()), e);
    return {draw(store, members, records, window, e)};
  }
  RankPlan plan = plan_ranks(store, p);
  std::vector<std::vector<uint32_t>> orders;
  orders.reserve(plan.deal.records.size());
  for (uint32_t r = 0; r < plan.deal.records.size(); ++r)
    orders.push_back(draw(store, plan.members, plan.deal.records[r], window, plan.rngs[r]));
  return orders;
}

std::vector<uint32_t> epoch_order(const Store& store, const OrderParams& p) {
  if (p.world <= 1) return epoch_rank_orders(store, p).front();
  RankPlan plan = plan_ranks(store, p);
  if (plan.deal.records.empty()) return {};  // no files at all
  // A rank without records of its own (more ranks than records) repeats another's order.
  const auto ranks = static_cast<uint32_t>(plan.deal.records.size());
  const uint32_t own = p.rank < ranks ? p.rank : p.rank % ranks;
  std::vector<uint32_t> order =
      draw(store, plan.members, plan.deal.records[own], std::max<uint32_t>(1, p.window), plan.rngs[own]);
  // Every rank as long as the longest: the tail of the rank's own order repeated end to end,
  // i.e. entry j >= n is order[(j - L) mod n] (records already read, no other rank's).
  const uint64_t n = order.size(), len = plan.deal.longest;
  order.reserve(len);
  for (uint64_t j = n; j < len; ++j) order.push_back(order[((j % n) + n - len % n) % n]);
  return order;
}

std::vector<std::vector<uint32_t>> rank_records(const Store& store, const OrderParams& p) {
  if (p.world <= 1) {
    std::vector<uint32_t> all;
    const auto members = record_members(store);
    for (uint32_t r = 0; r < members.size(); ++r)
      if (!members[r].empty()) all.push_back(r);
    return {all};
  }
  return plan_ranks(store, p).deal.records;
}

}  // namespace fid::index
