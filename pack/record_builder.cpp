#include "pack/record_builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "common/fd.h"
#include "common/posix_io.h"

namespace fid::pack {

namespace {

constexpr int kLevels = codec::kJpegLevels;
// A file record's buffer is reserved up front (a quarter over the target: the file that crosses it
// still fits) up to this much; a larger target grows it as files come, so a huge --record-bytes
// costs only what the files take.
constexpr uint64_t kMaxReserve = 256ull << 20;

}  // namespace

RecordBuilder::RecordBuilder(index::RecordLayout layout, uint64_t record_bytes)
    : layout_(layout),
      record_bytes_(record_bytes),
      reserve_(layout == index::RecordLayout::scan ? 0 : std::min(record_bytes + record_bytes / 4, kMaxReserve)),
      regions_(layout == index::RecordLayout::scan ? kLevels + 1 : 1) {}

void RecordBuilder::clear() {
  for (auto& r : regions_) {
    r.clear();
    if (r.capacity() > 2 * std::max(record_bytes_, reserve_)) std::vector<uint8_t>().swap(r);
  }
  members_.clear();
  bytes_ = 0;
  clips_.clear();
  clip_ = kNoClip;
}

void RecordBuilder::add(const PreparedFile& f, uint32_t clip, uint32_t clip_dir) {
  if (reserve_ && regions_[0].capacity() == 0) regions_[0].reserve(reserve_);
  if (clip != clip_) end_clip_run();
  if (clip != kNoClip && clip != clip_) {
    clip_ = clip;
    clips_.push_back(ClipRow{clip_dir, static_cast<uint32_t>(members_.size()), 0});
    if (layout_ == index::RecordLayout::file) by_level_.resize(kLevels + 1);
  }
  if (clip != kNoClip) ++clips_.back().frames;
  Member m;
  m.file = StoredFile{f.source_index, f.kind, f.script, f.width, f.height, f.source_size, f.mtime_ns, 0, 0, {}, f.note};
  if (layout_ == index::RecordLayout::scan) {
    for (int i = 0; i <= kLevels; ++i) m.pieces.push_back(append(i, f.jpeg.piece(i)));
  } else if (layout_ == index::RecordLayout::file && clip != kNoClip) {
    for (int i = 0; i <= kLevels; ++i) {  // placed in region 0 when the run ends (end_clip_run)
      std::vector<uint8_t>& level = by_level_[static_cast<size_t>(i)];
      const std::span<const uint8_t> piece = f.jpeg.piece(i);
      m.pieces.push_back(LocalPiece{0, level.size(), static_cast<uint32_t>(piece.size()), index::piece_checksum(piece)});
      level.insert(level.end(), piece.begin(), piece.end());
    }
  } else if (layout_ == index::RecordLayout::file) {
    for (int i = 0; i <= kLevels; ++i) m.pieces.push_back(append(0, f.jpeg.piece(i)));
  } else {
    m.pieces.push_back(append(0, f.payload));
  }
  bytes_ += f.full_bytes();
  members_.push_back(std::move(m));
}

void RecordBuilder::end_clip_run() {
  if (clip_ == kNoClip) return;
  clip_ = kNoClip;
  if (layout_ != index::RecordLayout::file) return;
  const ClipRow& run = clips_.back();
  std::vector<uint8_t>& region = regions_[0];
  for (size_t k = 0; k < by_level_.size(); ++k) {
    const uint64_t at = region.size();
    for (uint32_t j = run.first_slot; j < run.first_slot + run.frames; ++j) members_[j].pieces[k].offset += at;
    region.insert(region.end(), by_level_[k].begin(), by_level_[k].end());
    by_level_[k].clear();
  }
}

fid::Result<RecordInfo> RecordBuilder::write(const std::filesystem::path& store_tmp, uint32_t id) {
  end_clip_run();
  RecordInfo info;
  info.layout = layout_;
  info.clips = clips_;
  info.path = index::record_path(id);
  std::vector<uint64_t> region_start;
  uint64_t pos = index::kRecordHeaderSize;
  for (auto& r : regions_) {
    region_start.push_back(pos);
    pos += r.size();
    info.region_ends.push_back(pos);
  }
  info.size = pos;
  const std::filesystem::path p = store_tmp / info.path;
  Fd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int err = errno;
    return fid::Error{err, fmt::format("{}: cannot create: {}", p.string(), std::strerror(err))};
  }
  auto header = index::record_header(id, layout_);
  const std::string what = p.string() + ": write failed";
  Status written = write_loop(fd.get(), header.data(), header.size(), what);
  for (auto& r : regions_) written = written ? write_loop(fd.get(), r.data(), r.size(), what) : std::move(written);
  if (written && ::fdatasync(fd.get()) != 0) written = io_error(errno, what);
  if (!written) return std::move(written).error();
  uint32_t slot = 0;
  for (Member& m : members_) {
    m.file.record = id;
    m.file.slot = slot++;
    for (LocalPiece& lp : m.pieces)
      m.file.pieces.push_back(index::Piece{region_start[lp.region] + lp.offset, lp.size, lp.checksum});
  }
  return info;
}

RecordBuilder::LocalPiece RecordBuilder::append(int region, std::span<const uint8_t> bytes) {
  auto& r = regions_[static_cast<size_t>(region)];
  LocalPiece lp{region, r.size(), static_cast<uint32_t>(bytes.size()), index::piece_checksum(bytes)};
  r.insert(r.end(), bytes.begin(), bytes.end());
  return lp;
}

}  // namespace fid::pack
