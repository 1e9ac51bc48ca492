#include "index/order.h"

#include <algorithm>

namespace fid::index {

namespace {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
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

}  // namespace

std::vector<uint32_t> epoch_order(const Store& store, const OrderParams& p) {
  const auto files = store.files();
  const auto nrec = static_cast<uint32_t>(store.records().size());
  // Files of each record in slot order.
  std::vector<std::vector<uint32_t>> members(nrec);
  for (const File& f : files) members[f.record].push_back(f.id);
  for (auto& m : members)
    std::sort(m.begin(), m.end(), [&](uint32_t a, uint32_t b) { return files[a].slot < files[b].slot; });

  SplitMix64 rng{p.seed ^ (0xD1B54A32D192ED03ull * (p.epoch + 1))};
  std::vector<uint32_t> rec_order(nrec);
  for (uint32_t i = 0; i < nrec; ++i) rec_order[i] = i;
  for (uint32_t i = nrec; i > 1; --i) std::swap(rec_order[i - 1], rec_order[rng.below(i)]);

  std::vector<uint32_t> order;
  order.reserve(files.size());
  std::vector<uint32_t> pool;  // not-yet-drawn files of the active records
  const uint32_t window = std::max<uint32_t>(1, p.window);
  uint32_t next_rec = 0, active = 0;
  std::vector<uint32_t> remaining(nrec, 0);
  auto admit = [&] {
    while (active < window && next_rec < nrec) {
      uint32_t r = rec_order[next_rec++];
      if (members[r].empty()) continue;
      pool.insert(pool.end(), members[r].begin(), members[r].end());
      remaining[r] = static_cast<uint32_t>(members[r].size());
      ++active;
    }
  };
  admit();
  while (!pool.empty()) {
    uint32_t i = rng.below(static_cast<uint32_t>(pool.size()));
    uint32_t id = pool[i];
    pool[i] = pool.back();
    pool.pop_back();
    order.push_back(id);
    if (--remaining[files[id].record] == 0) {
      --active;
      admit();
    }
  }
  if (p.world <= 1) return order;
  std::vector<uint32_t> mine;
  mine.reserve(order.size() / p.world + 1);
  for (size_t i = p.rank; i < order.size(); i += p.world) mine.push_back(order[i]);
  return mine;
}

}  // namespace fid::index
