// Write side of a store: walks a source tree, transcodes JPEGs into level pieces, lays them out
// in records (PCR layout) in a seeded random order, and writes index.sqlite. The store appears
// at its final path only when complete (temporary folder + rename).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codec/jpeg.h"
#include "common/error.h"
#include "pack/clips.h"
#include "pack/shard.h"
#include "sources/folder_source.h"
#include "sources/pack_source.h"
#include "sources/video_source.h"
#include "index/store.h"

namespace fid::pack {

struct PackOptions {
  // One folder, or one or more tar files (docs/FORMAT.md "Sources").
  std::vector<std::filesystem::path> sources;
  bool expand_inner_tars = false;  // a member NAME.tar of a tar source becomes the folder NAME
  std::filesystem::path store;
  unsigned jobs = 0;                 // 0 = all cores
  uint64_t record_bytes = 8u << 20;  // target record size at full level
  // A record also closes at this many files, so that what it holds in memory until it is written
  // (its files' rows) stays bounded when files are tiny or empty.
  uint32_t record_files = 65536;
  uint64_t seed = 0;
  codec::LevelScripts levels = codec::LevelScripts::pcr;  // scan scripts of the JPEGs
  index::StoreLayout layout = index::StoreLayout::file;                  // where the JPEGs' pieces lie (docs/MOUNT.md, "Which layout")
  // The part of the source to pack (pack/shard.h): every folder, and the files of this part (a
  // clip's frames go with their folder).
  Shard shard;
  // Which folders are clips, each kept together in the storage order (pack/clips.h). A source
  // read in its own order (a compressed tar) has none.
  ClipRule clips;
  // `--video-frames`: videos become clip folders of JPEG frames (sources/video_source.h); unset, a
  // video is a file like any other (a blob).
  std::optional<video::FramesOptions> video_frames;
  // `--video-streams`: videos become folders of frames kept as their compressed streams, GOP by GOP
  // (sources/video_source.h). At most one of video_frames and video_streams.
  std::optional<video::StreamOptions> video_streams;
  // Called once the source is listed, before a file is read; its error fails the pack (pack
  // --append: a path the store already has).
  std::function<fid::Status(const sources::SourceTree&)> check_listing;
  // pack --append --replace: a source file at a path the store has replaces the store's file
  // (append.h); without it such a path is refused.
  bool replace = false;
  // pack --append: the store that `store` (the appended part's folder) lies in. The source must
  // neither hold the store it writes nor lie in it (compared as real paths, symlinks resolved),
  // and a folder walk skips the store where a symlink leads into it.
  std::filesystem::path writes_into;
};

struct PackProgress {
  uint64_t files_done = 0, files_total = 0;
  uint64_t source_bytes_done = 0, source_bytes_total = 0;
  double seconds = 0;
};

struct PackReport {
  uint64_t jpeg = 0, l3 = 0, blob = 0;
  uint64_t stream_frames = 0;  // frames of videos kept as streams (--video-streams)
  uint64_t l3_bytes = 0, l3_source_bytes = 0;  // L3 payloads and the sources they came from
  std::vector<std::pair<std::string, std::string>> blobbed;  // path, why it is not a JPEG/L3
  std::vector<std::pair<std::string, std::string>> skipped;  // path, why it is not in the store
  std::vector<uint64_t> bytes_by_level;                      // all JPEGs at level 1..L
  uint64_t source_bytes = 0, store_bytes = 0, records = 0, dirs = 0;
  uint64_t clips = 0, clip_frames = 0;  // clip folders found, and their files
  sources::VideoSummary videos;         // --video-frames, --video-streams: the videos turned into frames
  std::vector<uint64_t> frame_bytes_by_level;  // their frames (JPEGs) at level 1..L
  double seconds = 0;
};

// Where a store goes when it is not a local folder (an object store: pack/s3_upload.h). Pack
// still builds the store in a local temporary folder; the destination takes each record as soon as
// it is written and may remove the local file, so that the disk holds only records in flight.
class PackDestination {
 public:
  virtual ~PackDestination() = default;
  // Record `name` ("records/000001.rec") is complete in `file`. Called from one thread, in record
  // order; may return before the record is stored (a bounded number in flight). An error fails
  // the pack.
  virtual fid::Status add_record(const std::filesystem::path& file, const std::string& name) = 0;
  // Every record has been added and the index is complete in `index_file`: returns once all the
  // records are stored and then the index, that is once the store is whole at the destination.
  virtual fid::Status finish(const std::filesystem::path& index_file) = 0;
};

// What a pack reads from and writes to when that is not given by the options' paths.
struct PackIo {
  // A source the caller made (s3://, http(s)://: sources/remote_source.h); null: options.sources.
  std::unique_ptr<sources::PackSource> source;
  // A store the caller opened for writing (s3://). Then options.store is a local scratch path
  // (absent or an empty folder): the store is built beside it and removed when pack returns.
  PackDestination* destination = nullptr;
};

// Checks the options before anything is written: the sources are one folder or tar files, the
// record size is at least 4096, the store is absent or an empty folder, neither inside a source
// folder nor holding it (nor is options.writes_into), and its parent folder exists. Returns the store's absolute path. Touches nothing. A failure here is the
// caller's mistake (the command line reports it as a usage error); pack() checks the same first.
// With io.source, options.sources only names it in messages.
fid::Result<std::filesystem::path> check_pack_options(const PackOptions& options, const PackIo& io = {});

// The source pack reads when the caller gives none: the folder, or the tar files, that
// options.sources names (as check_pack_options accepted them). A folder's walk skips the folders
// `excluded` (device, inode): the store being written, where a symlink of the source leads to it.
std::unique_ptr<sources::PackSource> local_source(const PackOptions& options, sources::FolderIds excluded = {});

// Packs options.source into options.store. On any failure, and when `cancel` becomes true
// (ECANCELED), nothing is left at options.store. `progress` is called from one thread.
fid::Result<PackReport> pack(const PackOptions& options, const std::function<void(const PackProgress&)>& progress,
                             const std::atomic<bool>& cancel);
fid::Result<PackReport> pack(const PackOptions& options, PackIo io,
                             const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>& cancel);

// The storage order of n files for a seed: Fisher-Yates driven by SplitMix64 (docs/FORMAT.md).
std::vector<uint32_t> storage_permutation(uint32_t n, uint64_t seed);

}  // namespace fid::pack
