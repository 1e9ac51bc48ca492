// Store's loader, continued: the optional tables of clips (format 5) and videos, checked against
// the records, files and folders loaded before them.
#include <fmt/format.h>

#include "codec/video_stream.h"
#include "index/sqlite_db.h"
#include "index/store.h"
#include "index/store_load_errors.h"
#include "index/videos_table.h"

namespace fid::index {

void Store::place_clip_run(ClipRun& c, uint64_t& pos, uint64_t region_end, const std::string& ip) {
  const std::span<const uint32_t> frames = record_files(c.record).subspan(c.first_slot, c.frames);
  c.offset = pos;
  c.level_end.assign(static_cast<size_t>(levels_) + 1, 0);
  for (size_t k = 0; k < c.level_end.size(); ++k) {
    for (uint32_t id : frames) {
      Piece& p = pieces_[files_[id].first_piece + k];
      if (p.size > region_end - pos)
        throw corrupt_index(ip, fmt::format("file {} piece {} lies outside record {}", id, k, c.record));
      p.offset = pos;
      pos += p.size;
    }
    c.level_end[k] = pos;
  }
}

void Store::load_clips(SqliteDb& db, const std::string& ip) {
  if (format_version_ < kClipsFormatVersion) return;
  auto q = must(db.prepare("SELECT id, dir, record, first_slot, frames FROM clips ORDER BY id"));
  while (must(q.step())) {
    const int64_t id = q.integer(0), dir = q.integer(1), record = q.integer(2), n = q.integer(4);
    int64_t first = q.integer(3);
    const ClipRun* before = clips_.empty() ? nullptr : &clips_.back();
    const bool known = record >= 0 && record < static_cast<int64_t>(records_.size());
    if (first < 0 || n < 1)
      throw corrupt_index(ip, fmt::format("clip {}: {} frames from slot {}", id, n, first));
    // The index's slots count the unreferenced ones (format 6), the files' slots do not.
    const int64_t index_first = first;
    for (const Unreferenced& u : known ? unreferenced_in(static_cast<uint32_t>(record)) : std::span<const Unreferenced>()) {
      if (u.slot >= index_first && u.slot - index_first < n)
        throw corrupt_index(ip, fmt::format("clip {}: slot {} of record {} is an unreferenced one", id, u.slot, record));
      if (u.slot < index_first) --first;
    }
    if (id != static_cast<int64_t>(clips_.size()) || dir <= 0 || dir >= static_cast<int64_t>(dirs_.size()) || !known ||
        (before && (record < before->record || (record == before->record && first < before->first_slot + before->frames))))
      throw corrupt_index(ip, fmt::format("clip {} (folder {}, record {}) is out of range or order", id, dir, record));
    Record& rec = records_[static_cast<size_t>(record)];
    const std::span<const uint32_t> members = record_files(rec.id);
    // n and first are compared with the record's file count before any sum of theirs is made: a
    // crafted count near 2^63 must not wrap past the check.
    const auto count = static_cast<int64_t>(members.size());
    if (rec.layout == RecordLayout::whole || n > count || first > count - n)
      throw corrupt_index(ip, fmt::format("clip {}: {} frames from slot {} do not fit the {} JPEG slots of record {}", id,
                                          n, first, rec.layout == RecordLayout::whole ? 0 : count, record));
    for (int64_t slot = first; slot < first + n; ++slot) {
      const File& f = files_[members[static_cast<size_t>(slot)]];
      if (f.kind != FileKind::jpeg || f.dir != static_cast<uint32_t>(dir))
        throw corrupt_index(ip, fmt::format("clip {}: file {} of record {} is not a JPEG of folder {}", id, f.id, record, dir));
    }
    if (rec.clip_count++ == 0) rec.clip_begin = static_cast<uint32_t>(clips_.size());
    clips_.push_back(ClipRun{static_cast<uint32_t>(id), static_cast<uint32_t>(dir), rec.id, static_cast<uint32_t>(first),
                             static_cast<uint32_t>(n), 0, {}});
  }
}

void Store::load_videos(SqliteDb& db, const std::string& ip) {
  Result<std::vector<VideoSource>> videos = read_videos_table(db, dirs_);
  if (!videos && videos.error().code == EINVAL) throw corrupt_index(ip, videos.error().message);
  videos_ = must(std::move(videos));
  check_frames(ip);
}

// Frames lie only in video stream folders, which hold nothing else: their GOPs in frame order,
// each a first frame holding the GOP's piece and frames after it with empty pieces, every frame
// of the stream's stored size.
void Store::check_frames(const std::string& ip) {
  std::vector<bool> stream_dir(dirs_.size(), false);
  for (const VideoSource& v : videos_) {
    if (!v.is_stream()) continue;
    const Dir& d = dirs_[v.dir];
    if (d.subdir_count != 0)
      throw corrupt_index(ip, fmt::format("video stream folder {} holds folders", v.dir));
    stream_dir[v.dir] = true;
    for (uint32_t k = 0; k < d.file_count; ++k) {
      const File& f = files_[child_files_[d.file_begin + k]];
      const Piece& p = pieces_[f.first_piece];
      const uint32_t before = k == 0 ? UINT32_MAX : files_[child_files_[d.file_begin + k - 1]].script;
      const bool starts = f.script == 0;
      if (f.kind != FileKind::frame || f.id != files_[child_files_[d.file_begin]].id + k ||
          (!starts && f.script != before + 1) || f.script >= codec::kMaxGopFrames || starts != (p.size != 0) ||
          f.width != v.stream.width || f.height != v.stream.height)
        throw corrupt_index(ip, fmt::format("file {} in video stream folder {} is not its next frame", f.id, v.dir));
    }
  }
  for (const File& f : files_)
    if ((f.kind == FileKind::frame) != stream_dir[f.dir])
      throw corrupt_index(ip, fmt::format("file {} ({}) in folder {}: frames are exactly the files of video stream "
                                          "folders", f.id, kind_name(f.kind), f.dir));
}

}  // namespace fid::index
