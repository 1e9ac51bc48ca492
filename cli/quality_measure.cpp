#include "cli/quality_measure.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/parallel.h"
#include "codec/jpeg.h"
#include "core/read_range.h"

namespace fid::cli {

namespace {

// Reads every piece of f once, then decodes each level from them and scores it against full.
std::string measure_file(const index::Store& store, storage::RecordSource& source, const index::File& f,
                         std::vector<uint8_t>& pieces_buf, codec::LevelScores& out) {
  const int levels = store.levels();
  const uint64_t all = store.size_at_level(f, levels) - index::level_trailer(f.kind).size();
  core::StoredPieces stored(store, source);
  if (Status st = core::read_range(store, f, levels, 0, all, stored, pieces_buf); !st.ok()) return st.error().message;
  core::MemoryPieces pieces(store, pieces_buf);
  std::vector<uint8_t> file;
  auto decode_level = [&](int k, codec::LumaPlane& luma) -> std::string {
    if (Status st = core::read_range(store, f, k, 0, store.size_at_level(f, k), pieces, file); !st.ok())
      return fmt::format("level {}: {}", k, st.error().message);
    fid::Result<codec::DecodedImage> decoded = codec::decode_jpeg_strict(file);
    if (!decoded) return fmt::format("level {} does not decode: {}", k, decoded.error().message);
    luma = codec::luma_of(*decoded);
    return {};
  };
  codec::LumaPlane full, level;
  if (std::string why = decode_level(levels, full); !why.empty()) return why;
  out.bytes.resize(static_cast<size_t>(levels));
  out.scores.resize(static_cast<size_t>(levels));
  for (int k = 1; k <= levels; ++k) {
    out.bytes[static_cast<size_t>(k - 1)] = store.size_at_level(f, k);
    if (k < levels) {
      if (std::string why = decode_level(k, level); !why.empty()) return why;
    }
    fid::Result<codec::QualityScores> s = codec::compare_luma(full, k < levels ? level : full);
    if (!s) return fmt::format("level {}: {}", k, s.error().message);
    out.scores[static_cast<size_t>(k - 1)] = *s;
  }
  return {};
}

}  // namespace

std::vector<uint32_t> jpeg_ids(const index::Store& store) {
  std::vector<uint32_t> ids;
  for (const index::File& f : store.files())
    if (f.kind == index::FileKind::jpeg) ids.push_back(f.id);
  return ids;
}

std::vector<uint32_t> storage_ordered_sample(const index::Store& store, const std::vector<uint32_t>& ids,
                                             size_t count, uint64_t seed) {
  std::vector<uint32_t> sample = codec::seeded_sample(ids, count, seed);
  auto files = store.files();
  std::sort(sample.begin(), sample.end(), [&](uint32_t x, uint32_t y) {
    return store.storage_position(files[x]) < store.storage_position(files[y]);
  });
  return sample;
}

std::vector<MeasuredFile> measure_files(const index::Store& store, storage::RecordSource& source,
                                        const std::vector<uint32_t>& ids, unsigned jobs, ProgressLine& progress) {
  auto files = store.files();
  std::vector<MeasuredFile> results(ids.size());
  for_each_parallel(
      ids.size(), jobs,
      [&](size_t i, std::vector<uint8_t>& buf) -> uint64_t {
        const index::File& f = files[ids[i]];
        results[i].path = store.relative_path(f);
        results[i].error = measure_file(store, source, f, buf, results[i].levels);
        return buf.size();
      },
      progress);
  std::sort(results.begin(), results.end(), [](const MeasuredFile& x, const MeasuredFile& y) { return x.path < y.path; });
  return results;
}

std::string class_of(const std::string& relative_path) {
  size_t slash = relative_path.find('/');
  return slash == std::string::npos ? std::string() : relative_path.substr(0, slash);
}

config::Rule class_rule(const std::string& cls, int level) {
  config::Rule rule;
  rule.glob = cls.empty() ? "*" : config::glob_escape(cls) + "/**";
  rule.level = level;
  return rule;
}

}  // namespace fid::cli
