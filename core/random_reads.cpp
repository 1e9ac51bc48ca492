#include "core/random_reads.h"

#include "core/record_cache.h"

#include <fmt/format.h>

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

}  // namespace fid::core
