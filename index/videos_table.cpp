// The index's optional videos table (docs/FORMAT.md "videos"), read and checked for the loader.
#include "index/videos_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "codec/video_stream.h"

namespace fid::index {

namespace {

// The video_streams rows (format 7), each joined to its folder's videos row.
Status read_video_streams(const SqliteDb& db, std::vector<VideoSource>& videos) {
  Result<bool> has = db.has_table("video_streams");
  if (!has) return std::move(has).error();
  if (!*has) return {};
  Result<SqliteStatement> q =
      db.prepare("SELECT dir, codec, extradata, width, height, gop, stored_bytes FROM video_streams ORDER BY dir");
  if (!q) return std::move(q).error();
  return q->each_row([&]() -> Status {
    const int64_t dir = q->integer(0), w = q->integer(3), h = q->integer(4), gop = q->integer(5),
                  bytes = q->integer(6);
    const std::string codec = q->text(1);
    const std::span<const uint8_t> extradata = q->blob(2);
    auto it = std::lower_bound(videos.begin(), videos.end(), dir,
                               [](const VideoSource& v, int64_t d) { return v.dir < d; });
    if (it == videos.end() || it->dir != dir)
      return Error{EINVAL, fmt::format("video stream of folder {} has no row in videos", dir)};
    if (codec.empty() || codec.size() > 64 || extradata.size() > (1u << 20) || w <= 0 || h <= 0 || w > codec::kMaxFrameSide ||
        h > codec::kMaxFrameSide || gop < 0 || gop > codec::kMaxGopFrames || bytes < 0)
      return Error{EINVAL, fmt::format("video stream of folder {} has a value out of range", dir)};
    it->stream.codec = codec;
    it->stream.extradata.assign(extradata.begin(), extradata.end());
    it->stream.width = static_cast<uint32_t>(w), it->stream.height = static_cast<uint32_t>(h);
    it->stream.gop = static_cast<uint32_t>(gop), it->stream.stored_bytes = static_cast<uint64_t>(bytes);
    return {};
  });
}

}  // namespace

Result<std::vector<VideoSource>> read_videos_table(const SqliteDb& db, std::span<const Dir> dirs) {
  std::vector<VideoSource> out;
  Result<bool> has = db.has_table("videos");
  if (!has) return std::move(has).error();
  if (!*has) return out;
  Result<SqliteStatement> q = db.prepare(
      "SELECT dir, name, source_size, codec, fps_num, fps_den, width, height, frames FROM videos ORDER BY dir");
  if (!q) return std::move(q).error();
  auto u32 = [](int64_t v) { return v >= 0 && v <= static_cast<int64_t>(UINT32_MAX); };
  Status read = q->each_row([&]() -> Status {
    const int64_t dir = q->integer(0), size = q->integer(2), num = q->integer(4), den = q->integer(5),
                  w = q->integer(6), h = q->integer(7), frames = q->integer(8);
    const std::span<const uint8_t> name = q->blob(1);
    const std::string codec = q->text(3);
    if (dir <= 0 || dir >= static_cast<int64_t>(dirs.size()) || size < 0 || !u32(num) || !u32(den) || den == 0 ||
        !u32(w) || !u32(h) || !u32(frames) || name.empty() || name.size() > 255 || codec.size() > 64)
      return Error{EINVAL, fmt::format("video of folder {} has a value out of range", dir)};
    const uint32_t files = dirs[static_cast<size_t>(dir)].file_count;
    if (frames != files)
      return Error{EINVAL, fmt::format("video of folder {} says {} frames, the folder holds {} files", dir, frames, files)};
    out.push_back(VideoSource{static_cast<uint32_t>(dir), static_cast<uint32_t>(frames), static_cast<uint32_t>(num),
                              static_cast<uint32_t>(den), static_cast<uint32_t>(w), static_cast<uint32_t>(h),
                              static_cast<uint64_t>(size), std::string(name.begin(), name.end()), codec, {}});
    return {};
  });
  if (!read) return std::move(read).error();
  if (Status streams = read_video_streams(db, out); !streams) return std::move(streams).error();
  return out;
}

}  // namespace fid::index
