#include "core/random_reads.h"

#include "common/log.h"
#include "core/record_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace fid::core {

uint64_t prefix_bytes_needed(const index::Store& store, const LevelPolicy& policy, const ReadShare& share,
                             bool gather) {
  const auto records = store.records();
  std::vector<uint8_t> level(records.size(), 0);  // highest level a file of the record reads at
  for (const index::File& f : store.files()) {
    if (f.record >= records.size() || (!share.records.empty() && !share.records[f.record])) continue;
    const int l = f.kind == index::FileKind::jpeg ? policy.effective(f.id) : store.levels();
    level[f.record] = static_cast<uint8_t>(std::max<int>(level[f.record], l));
  }
  uint64_t total = 0;
  for (uint32_t r = 0; r < records.size(); ++r)
    if (level[r] != 0 && !records[r].region_end.empty())
      total += prefix_memory(record_prefix_len(store, r, record_prefix_level(store, r, level[r], gather)));
  return total;
}

std::string RandomReadsDecision::text() const {
  const std::string mode = records ? "records" : "pieces";
  if (setting != config::RandomReads::auto_) return fmt::format("{} (random_reads={})", mode, mode);
  return fmt::format("{} (auto: the prefixes of {} need {} B, {} {} {} B)", mode, share, needed, budget_name,
                     records ? "holds" : "holds only", budget);
}

RandomReadsDecision decide_random_reads(config::RandomReads setting, uint64_t needed, uint64_t cache_bytes,
                                        std::optional<uint64_t> disk_cache_bytes, std::string share) {
  RandomReadsDecision d;
  d.setting = setting;
  d.needed = needed;
  d.share = std::move(share);
  d.memory_holds_all = needed <= cache_bytes;
  d.budget = disk_cache_bytes.value_or(cache_bytes);
  d.budget_name = disk_cache_bytes ? "disk_cache_size" : "cache";
  switch (setting) {
    case config::RandomReads::records: d.records = true; break;
    case config::RandomReads::pieces: d.records = false; break;
    case config::RandomReads::auto_: d.records = needed <= d.budget; break;
  }
  return d;
}

// ---- the mount's mode ---------------------------------------------------------------------------

RandomReads::RandomReads(const index::Store& store, const storage::RecordSource& source,
                         const config::Settings& settings, const LevelPolicy& levels, FileReader& reader)
    : store_(store),
      source_(source),
      setting_(settings.random_reads),
      cache_bytes_(settings.cache_bytes),
      levels_(levels),
      reader_(reader) {
  decide();
}

void RandomReads::decide() {
  std::lock_guard lock(mu_);
  decide_locked();
}

void RandomReads::decide_locked() {
  std::optional<uint64_t> disk_bytes;
  if (source_.keeps_copies()) disk_bytes = source_.local_copy_capacity();
  const uint64_t needed = prefix_bytes_needed(store_, levels_, share_, !source_.keeps_copies());
  RandomReadsDecision d = decide_random_reads(setting_, needed, cache_bytes_, disk_bytes, share_.what);
  const bool changed = d.records != decision_.records || d.text() != decision_.text();
  reader_.set_random_reads(d.records, d.memory_holds_all);
  if (changed) log_info("random reads: {}", d.text());
  decision_ = std::move(d);
}

void RandomReads::note_rank_order(const index::OrderParams& order) {
  std::lock_guard lock(mu_);
  if (order.world != share_world_ || (order.ranks == index::RankDeal::per_epoch && order.epoch != share_epoch_)) {
    share_world_ = order.world;
    share_ranks_.clear();
  }
  share_epoch_ = order.epoch;
  const auto dealt = index::rank_records(store_, order);
  if (dealt.empty()) return;
  // Ranks past the records share their records (rank % dealt.size()): the list stays bounded by
  // the record count whatever rank names readers make up.
  const uint32_t dealt_rank = static_cast<uint32_t>(order.rank % dealt.size());
  if (std::find(share_ranks_.begin(), share_ranks_.end(), dealt_rank) != share_ranks_.end()) return;
  share_ranks_.push_back(dealt_rank);
  std::sort(share_ranks_.begin(), share_ranks_.end());
  share_.records.assign(store_.records().size(), false);
  uint64_t count = 0;
  for (uint32_t r : share_ranks_) {
    for (uint32_t rec : dealt[r]) {
      if (!share_.records[rec]) ++count;
      share_.records[rec] = true;
    }
  }
  share_.what = fmt::format("the {} records of rank{} {} of {}", count, share_ranks_.size() > 1 ? "s" : "",
                            fmt::join(share_ranks_, ","), order.world);
  decide_locked();
}

void RandomReads::forget_share() {
  std::lock_guard lock(mu_);
  share_world_ = 1;
  share_ranks_.clear();
  share_ = ReadShare{};
  decide_locked();
}

RandomReadsDecision RandomReads::decision() const {
  std::lock_guard lock(mu_);
  return decision_;
}

}  // namespace fid::core
