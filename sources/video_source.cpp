// See video_source.h.
#include "sources/video_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "codec/jpeg.h"
#include "common/fd.h"
#include "common/posix_io.h"

namespace fid::sources {

namespace fsys = std::filesystem;

bool is_video_name(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  std::string ext(name.substr(dot + 1));
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == "mp4" || ext == "webm" || ext == "mkv" || ext == "avi" || ext == "mov";
}

namespace {

// Where a file of the new tree comes from.
struct Origin {
  uint32_t video = UINT32_MAX;  // UINT32_MAX: file `index` of the inner tree; else a frame of this video
  uint32_t index = 0;           // the inner file, or the frame
};

// A decoded video: its frames in a scratch file, back to back.
struct DecodedVideo {
  uint32_t inner = 0;  // file index in the inner tree
  std::string folder;  // the frames' folder, relative
  Fd scratch;
  std::vector<uint64_t> frame_end;  // end offset of each frame in the scratch file
  int64_t mtime_ns = 0;
  uint64_t source_bytes = 0;
  video::VideoInfo info;
  std::string failed;  // why it is not in the store; empty when decoded
  // --video-streams: each frame's place in its GOP (the GOP's piece is its first frame's bytes,
  // the others' are empty) and the stored stream.
  std::vector<uint32_t> place;
  video::StreamInfo stream;
};

// --video-frames names its JPEGs' extension; a stream's frames get the extension of the mount's
// raw_format there.
// A stream's frame numbers are padded to one width (5 digits or more), so that the names' bytewise
// order, the store's file order, is the frames' order.
std::string frame_name(size_t k, size_t frames, bool streams) {
  if (!streams) return fmt::format("img_{:05d}.jpg", k + 1);
  return fmt::format("img_{:0{}d}", k + 1, std::max<size_t>(5, std::to_string(frames).size()));
}

// An unlinked file in `dir`: gone from the folder at once, freed when closed.
fid::Result<Fd> scratch_file(const fsys::path& dir) {
  std::string name = (dir / "video-frames.XXXXXX").string();
  Fd fd(::mkostemp(name.data(), O_CLOEXEC));
  if (fd.get() < 0) return io_error(errno, fmt::format("{}: cannot make a scratch file", dir.string()));
  ::unlink(name.c_str());
  return fd;
}

// Either options: the videos as JPEG frames, or kept as their streams.
using VideoOptions = std::variant<video::FramesOptions, video::StreamOptions>;

class VideoFramesSource final : public PackSource {
 public:
  VideoFramesSource(std::unique_ptr<PackSource> inner, const VideoOptions& opt, fsys::path scratch_dir,
                    unsigned jobs, VideoSummary& summary)
      : inner_(std::move(inner)), opt_(opt), streams_(std::holds_alternative<video::StreamOptions>(opt)),
        scratch_dir_(std::move(scratch_dir)), jobs_(std::max(1u, jobs)), summary_(summary) {}

  fid::Result<SourceTree> list(const std::atomic<bool>& cancel) override {
    if (inner_->stream_order())
      return fid::Error{EINVAL, std::string(streams_ ? "--video-streams" : "--video-frames") +
                                " reads videos at random, and tar sources are read as a stream: "
                                "extract them to a folder, or pack the folder"};
    fid::Result<SourceTree> listed = inner_->list(cancel);
    if (!listed) return listed;
    inner_tree_ = std::move(listed).value();
    for (uint32_t i = 0; i < inner_tree_.files.size(); ++i)
      if (is_video_name(inner_tree_.files.name(i))) {
        DecodedVideo v;
        v.inner = i;
        const std::string rel = inner_tree_.rel(i);
        v.folder = rel.substr(0, rel.rfind('.'));
        videos_.push_back(std::move(v));
      }
    if (fid::Status decoded = decode_all(cancel); !decoded) return std::move(decoded).error();
    if (cancel) return fid::Error{ECANCELED, "interrupted"};
    return build_tree();
  }

  fid::Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const override {
    (void)tree;
    const Origin& o = origin_[i];
    if (o.video == UINT32_MAX) return inner_->read(inner_tree_, o.index);
    const DecodedVideo& v = videos_[o.video];
    const uint64_t begin = o.index == 0 ? 0 : v.frame_end[o.index - 1];
    SourceBytes out;
    out.mtime_ns = v.mtime_ns;
    out.bytes.resize(v.frame_end[o.index] - begin);
    if (fid::Status s = pread_exact(v.scratch.get(), out.bytes.data(), out.bytes.size(), begin, "reading a frame back");
        !s)
      return std::move(s).error();
    return out;
  }

  bool read_errors_fail() const override { return inner_->read_errors_fail(); }

 private:
  fid::Status decode_all(const std::atomic<bool>& cancel) {
    std::atomic<size_t> next{0};
    std::mutex mu;
    fid::Status failure;
    const unsigned threads = static_cast<unsigned>(std::min<size_t>(jobs_, videos_.size()));
    VideoOptions each = opt_;
    const int per_video = static_cast<int>(std::max(1u, jobs_ / std::max(1u, threads)));  // a lone video decodes on every core
    std::visit([&](auto& o) { o.threads = per_video; }, each);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (size_t k; (k = next++) < videos_.size() && !cancel;) {
          fid::Status s = decode_one(videos_[k], each, cancel);
          if (!s) {
            std::lock_guard lock(mu);
            if (failure) failure = std::move(s);
          }
        }
      });
    for (auto& t : pool) t.join();
    return failure;
  }

  // The video's frames into its scratch file; a video that does not decode is marked failed,
  // only a scratch file that cannot be written fails the pack.
  fid::Status decode_one(DecodedVideo& v, const VideoOptions& opt, const std::atomic<bool>& cancel) {
    fid::Result<Fd> scratch = scratch_file(scratch_dir_);
    if (!scratch) return std::move(scratch).error();
    v.scratch = std::move(scratch).value();
    video::VideoInput input;
    input.path = inner_->local_path(inner_tree_, v.inner);
    SourceBytes whole;
    if (input.path.empty()) {
      fid::Result<SourceBytes> read = inner_->read(inner_tree_, v.inner);
      if (!read) {
        if (inner_->read_errors_fail()) return std::move(read).error();
        v.failed = read.error().message;
        return {};
      }
      whole = std::move(read).value();
      input.bytes = whole.bytes;
      v.mtime_ns = whole.mtime_ns;
      v.source_bytes = whole.bytes.size();
    } else {
      struct stat st {};
      if (::stat(input.path.c_str(), &st) != 0) {
        v.failed = fmt::format("cannot stat: {}", std::strerror(errno));
        return {};
      }
      v.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      v.source_bytes = static_cast<uint64_t>(st.st_size);
    }
    uint64_t written = 0;
    fid::Status write_failure;
    // Appends a frame's bytes (a JPEG, a GOP's piece, or nothing) to the scratch file.
    auto add_frame = [&](std::span<const uint8_t> bytes) -> fid::Status {
      if (bytes.size() > kMaxSourceFileBytes) return fid::Error{EFBIG, "a frame's bytes are over 4 GiB"};
      if (fid::Status s = pwrite_loop(v.scratch.get(), bytes.data(), bytes.size(), written, "writing a frame"); !s) {
        write_failure = s;
        return s;
      }
      written += bytes.size();
      v.frame_end.push_back(written);
      return {};
    };
    fid::Status decoded = streams_ ? store_stream(v, input, std::get<video::StreamOptions>(opt), add_frame, cancel)
                                   : decode_jpegs(v, input, std::get<video::FramesOptions>(opt), add_frame, cancel);
    if (!write_failure) return fid::Error{write_failure.error().code,
                                          fmt::format("{}: {}", scratch_dir_.string(), write_failure.error().message)};
    if (!decoded) {
      v.failed = decoded.error().message;
      v.frame_end.clear();
      v.place.clear();
    }
    return {};
  }

  using AddFrame = std::function<fid::Status(std::span<const uint8_t>)>;

  static fid::Status decode_jpegs(DecodedVideo& v, const video::VideoInput& input, const video::FramesOptions& opt,
                                  const AddFrame& add_frame, const std::atomic<bool>& cancel) {
    auto on_frame = [&](const codec::ImageView& rgb) -> fid::Status {
      fid::Result<std::vector<uint8_t>> jpeg = codec::encode_jpeg(rgb, opt.quality);
      if (!jpeg) return std::move(jpeg).error();
      return add_frame(*jpeg);
    };
    fid::Result<video::VideoInfo> info = video::decode_frames(input, opt, on_frame, cancel);
    if (!info) return std::move(info).error();
    v.info = std::move(info).value();
    return {};
  }

  // A GOP's piece goes with its first frame; the frames after it are empty files.
  static fid::Status store_stream(DecodedVideo& v, const video::VideoInput& input, const video::StreamOptions& opt,
                                  const AddFrame& add_frame, const std::atomic<bool>& cancel) {
    auto on_gop = [&](video::StoredGop&& gop) -> fid::Status {
      for (uint32_t k = 0; k < gop.frames; ++k) {
        if (fid::Status s = add_frame(k == 0 ? std::span<const uint8_t>(gop.piece) : std::span<const uint8_t>{}); !s)
          return s;
        v.place.push_back(k);
      }
      return {};
    };
    fid::Result<video::StreamInfo> info = video::store_stream(input, opt, on_gop, cancel);
    if (!info) return std::move(info).error();
    v.stream = std::move(info).value();
    v.info = v.stream.source;
    return {};
  }

  struct Entry {  // a path of the new tree, sorted with the others
    uint8_t is_dir = 0;
    Origin origin;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };

  fid::Result<SourceTree> build_tree() {
    PathListing<Entry> listing;
    std::unordered_set<std::string> taken;  // the inner tree's paths: a frames' folder must not clash
    for (const SourceDir& d : inner_tree_.dirs) taken.insert(d.rel);
    for (uint32_t i = 0; i < inner_tree_.files.size(); ++i) taken.insert(inner_tree_.rel(i));
    for (size_t d = 1; d < inner_tree_.dirs.size(); ++d)
      if (fid::Status s = listing.add(Entry{1, {}, 0, inner_tree_.dirs[d].mtime_ns}, inner_tree_.dirs[d].rel); !s) return std::move(s).error();
    std::vector<bool> is_video(inner_tree_.files.size(), false);
    std::unordered_map<std::string, std::string> claimed;  // frames' folder -> the video whose frames it holds
    for (size_t k = 0; k < videos_.size(); ++k) {
      DecodedVideo& v = videos_[k];
      is_video[v.inner] = true;
      const std::string rel = inner_tree_.rel(v.inner);
      if (v.failed.empty() && taken.count(v.folder)) v.failed = fmt::format("its frames' folder '{}' is taken", v.folder);
      if (auto other = claimed.find(v.folder); v.failed.empty() && other != claimed.end())
        v.failed = fmt::format("its frames' folder '{}' is taken by the frames of {}", v.folder, other->second);
      if (!v.failed.empty()) {
        skipped_.emplace_back(rel, v.failed);
        continue;
      }
      claimed.emplace(v.folder, rel);
      if (fid::Status s = listing.add(Entry{1, {}, 0, v.mtime_ns}, v.folder); !s) return std::move(s).error();
      for (size_t f = 0; f < v.frame_end.size(); ++f) {
        const uint64_t size = v.frame_end[f] - (f ? v.frame_end[f - 1] : 0);
        if (fid::Status s = listing.add(Entry{0, {static_cast<uint32_t>(k), static_cast<uint32_t>(f)}, size, v.mtime_ns},
                                        v.folder + "/" + frame_name(f, v.frame_end.size(), streams_));
            !s)
          return std::move(s).error();
      }
      summary_.videos++;
      summary_.video_bytes += v.source_bytes;
      summary_.frames += v.frame_end.size();
      summary_.frame_bytes += v.frame_end.empty() ? 0 : v.frame_end.back();
      if (!v.stream.reencoded_why.empty()) summary_.reencoded.emplace_back(v.folder, v.stream.reencoded_why);
      if (!v.info.cut_short.empty())
        summary_.cut_short.emplace_back(v.folder, fmt::format("kept {} frames: {}", v.frame_end.size(), v.info.cut_short));
    }
    for (uint32_t i = 0; i < inner_tree_.files.size(); ++i)
      if (!is_video[i])
        if (fid::Status s = listing.add(Entry{0, {UINT32_MAX, i}, inner_tree_.files.listed_size(i), 0}, inner_tree_.rel(i)); !s)
          return std::move(s).error();
    listing.sort();
    SourceTreeBuilder builder(inner_tree_.dirs.empty() ? 0 : inner_tree_.dirs[0].mtime_ns);
    fid::Status built = listing.drain([&](const PathListing<Entry>::Entry& e) -> fid::Status {
      if (e.info.is_dir) return builder.add_dir(std::string(e.path), e.info.mtime_ns, e.info.mtime_ns);
      fid::Result<bool> added = builder.add_file(std::string(e.path), e.info.size, e.info.mtime_ns);
      if (!added) return std::move(added).error();
      if (*added) {
        origin_.push_back(e.info.origin);
        if (streams_)
          frame_place_.push_back(e.info.origin.video == UINT32_MAX ? kNotAFrame
                                                                  : videos_[e.info.origin.video].place[e.info.origin.index]);
      }
      return {};
    });
    if (!built) return std::move(built).error();
    SourceTree tree = builder.take();
    tree.frame_place = std::move(frame_place_);
    add_videos(tree);
    for (auto& s : inner_tree_.skipped) tree.skipped.push_back(s);
    for (auto& s : skipped_) tree.skipped.push_back(s);
    return tree;
  }

  // What each decoded video was, by its frames' folder (the index's videos table).
  void add_videos(SourceTree& tree) const {
    std::unordered_map<std::string_view, const DecodedVideo*> by_folder;
    for (const DecodedVideo& v : videos_)
      if (v.failed.empty()) by_folder.emplace(v.folder, &v);
    for (uint32_t d = 1; d < tree.dirs.size(); ++d) {
      auto it = by_folder.find(tree.dirs[d].rel);
      if (it == by_folder.end()) continue;
      const DecodedVideo& v = *it->second;
      const video::VideoInfo& i = v.info;
      const bool rate = i.fps_num > 0 && i.fps_den > 0;
      index::VideoSource row{d, static_cast<uint32_t>(v.frame_end.size()), rate ? i.fps_num : 0,
                             rate ? i.fps_den : 1, i.width, i.height, v.source_bytes,
                             std::string(inner_tree_.files.name(v.inner)), i.codec.substr(0, 64), {}};
      if (streams_) {
        row.stream.codec = v.stream.params.codec;
        row.stream.extradata = v.stream.params.extradata;
        row.stream.width = v.stream.params.width, row.stream.height = v.stream.params.height;
        row.stream.gop = v.stream.gop, row.stream.stored_bytes = v.stream.stored_bytes;
      }
      tree.videos.push_back(std::move(row));
    }
  }

  std::unique_ptr<PackSource> inner_;
  VideoOptions opt_;
  bool streams_;
  fsys::path scratch_dir_;
  unsigned jobs_;
  VideoSummary& summary_;
  SourceTree inner_tree_;
  std::vector<DecodedVideo> videos_;
  std::vector<Origin> origin_;  // by file index of the new tree
  std::vector<uint32_t> frame_place_;  // --video-streams: by file index of the new tree (SourceTree::frame_place)
  std::vector<std::pair<std::string, std::string>> skipped_;
};

}  // namespace

std::unique_ptr<PackSource> video_frames_source(std::unique_ptr<PackSource> inner, const video::FramesOptions& opt,
                                                std::filesystem::path scratch_dir, unsigned jobs,
                                                VideoSummary& summary) {
  return std::make_unique<VideoFramesSource>(std::move(inner), opt, std::move(scratch_dir), jobs, summary);
}

std::unique_ptr<PackSource> video_streams_source(std::unique_ptr<PackSource> inner, const video::StreamOptions& opt,
                                                 std::filesystem::path scratch_dir, unsigned jobs,
                                                 VideoSummary& summary) {
  return std::make_unique<VideoFramesSource>(std::move(inner), opt, std::move(scratch_dir), jobs, summary);
}

}  // namespace fid::sources
