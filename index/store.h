// Read side of a store: index.sqlite loaded once into compact tables, held in memory or mapped
// from a tables file (tables_file.h). Record bytes are read through a storage::RecordSource. No
// FUSE here; no SQLite after open().
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace fid::index {

// The newest version Store loads (every version from 1 up to it, docs/FORMAT.md). Pack writes 3
// for a scan-layout store and 4, the first version with file records, for a file-layout store,
// so that a reader of format 3 still reads every scan-layout store; 5, the first with clips, for
// a store that has clips, whose file records a reader of format 4 would misread; 6, the first with
// pieces no file references (an append that replaced files), whose slots a reader of format 5
// would find with gaps; 7, the first with video streams (frame files, the video_streams table).
inline constexpr int kFormatVersion = 7;
inline constexpr int kScanLayoutFormatVersion = 3;
inline constexpr int kFileLayoutFormatVersion = 4;
inline constexpr int kClipsFormatVersion = 5;
inline constexpr int kUnreferencedFormatVersion = 6;
inline constexpr int kVideoStreamsFormatVersion = 7;

// frame: a picture of a video kept as its stream (docs/FORMAT.md "Video streams"); its one piece
// is its GOP's piece where it is the GOP's first frame, else empty.
enum class FileKind : uint8_t { jpeg = 0, l3 = 1, blob = 2, frame = 3 };
std::string_view kind_name(FileKind k);

// The bytes of a file at level k (docs/FORMAT.md "Reading a file at a level"): its first
// pieces_at_level(kind, k, L) pieces in order, then level_trailer(kind) (a JPEG's EOI marker).
// The mount, verify, the fuzzers and the packer's sizes all use these two definitions.
uint32_t pieces_at_level(FileKind kind, int level, int levels);
std::span<const uint8_t> level_trailer(FileKind kind);

// One stored byte range of a file inside a record file.
struct Piece {
  uint64_t offset = 0;    // absolute offset in the record file
  uint32_t size = 0;
  uint32_t checksum = 0;  // low 32 bits of XXH3-64 of the bytes
};

struct File {
  uint32_t id = 0;           // index into Store::files()
  uint32_t dir = 0;          // parent directory id
  uint32_t name_off = 0, name_len = 0;  // into the name pool
  FileKind kind = FileKind::blob;
  uint8_t reserved[3] = {};  // zero: the row is written to the tables file as it is in memory
  uint32_t script = 0;       // jpeg: codec::ScanScript; l3: codec::shape_code (mode, palette); frame: its place in its GOP
  uint32_t record = 0;
  // Position of the file among its record's files (storage order): the index's slot less the
  // unreferenced slots before it (format 6), so that a record's files are slots 0..n-1.
  uint32_t slot = 0;
  uint32_t first_piece = 0;  // jpeg: levels()+1 pieces (header, level 1..L); others: 1 piece
  uint32_t piece_count = 0;
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;      // source mtime
};

struct Dir {
  uint32_t id = 0;
  uint32_t parent = 0;       // root's parent is itself (0)
  uint32_t name_off = 0, name_len = 0;
  // Children, sorted by name (bytewise): sub-directories first in `subdirs`, files in `files`.
  uint32_t subdir_begin = 0, subdir_count = 0;  // into Store::child_dirs()
  uint32_t file_begin = 0, file_count = 0;      // into Store::child_files()
  int64_t mtime_ns = 0;
};

enum class RecordLayout : uint8_t {
  scan = 0,   // region 0: JPEG headers of all files in slot order; region k: their level-k pieces
  whole = 1,  // region 0: whole payloads (blobs, L3) in slot order
  file = 2,   // region 0: each JPEG's pieces 0..L back to back, files in slot order
};

// Where a store keeps its JPEGs (meta `layout`): scan records, so that reading a record up to
// level k is one read of its prefix, or file records, so that reading one file at any level is
// one read of a contiguous range. Blobs and L3 files are in whole records either way.
enum class StoreLayout : uint8_t { scan = 0, file = 1 };
std::string_view layout_name(StoreLayout l);
// "scan" or "file"; false for anything else.
bool parse_layout(std::string_view text, StoreLayout& out);
// The record layout that holds a store's JPEGs.
inline RecordLayout jpeg_record_layout(StoreLayout l) {
  return l == StoreLayout::file ? RecordLayout::file : RecordLayout::scan;
}

struct Record {
  uint32_t id = 0;
  // The id in the record file's header: the id the pack gave it, which a merge keeps (records are
  // linked, never rewritten) while it renumbers the records.
  uint32_t header_id = 0;
  std::string path;          // relative to the store, e.g. records/000012.rec
  uint64_t size = 0;
  RecordLayout layout = RecordLayout::scan;
  std::vector<uint64_t> region_end;  // scan: end offset of region 0 (headers), 1..L; whole, file: 1 entry
  uint32_t clip_begin = 0, clip_count = 0;  // its clip runs: Store::clip_runs()[clip_begin, +clip_count)
};

// A run of one clip's frames in a record (docs/FORMAT.md "Clips"): slots first_slot ..
// first_slot + frames - 1. In a file record its frames lie by level from `offset`: every frame's
// header, then every frame's level-1 piece, ..., so that the run up to level k is the one range
// [offset, level_end[k]); in a scan record its frames are consecutive slots, and level_end is empty.
struct ClipRun {
  uint32_t id = 0;   // its row in the clips table
  uint32_t dir = 0;  // the clip's folder
  uint32_t record = 0, first_slot = 0, frames = 0;
  uint64_t offset = 0;
  std::vector<uint64_t> level_end;  // file records: levels + 1 absolute end offsets
  bool holds(uint32_t slot) const { return slot >= first_slot && slot - first_slot < frames; }
};

// A video kept as its stream (`pack --video-streams`, format 7): the stored stream's codec as
// libavcodec names its decoder, its private data, a frame's stored size, the GOP length it was
// re-encoded with (0: the source's own GOPs) and the bytes of its GOP pieces.
struct VideoStream {
  std::string codec;
  std::vector<uint8_t> extradata;
  uint32_t width = 0, height = 0, gop = 0;
  uint64_t stored_bytes = 0;
};

// A clip folder made from a video by `pack --video-frames` (docs/FORMAT.md "Videos"): what the
// video was, read without decoding a frame.
struct VideoSource {
  uint32_t dir = 0;                    // the clip's folder
  uint32_t frames = 0;                 // frames in the folder (img_00001.jpg ...)
  uint32_t fps_num = 0, fps_den = 1;   // the video's average frame rate; 0/1 when unknown
  uint32_t width = 0, height = 0;      // a frame as displayed (rotation applied), before scaling
  uint64_t source_size = 0;            // the video file's bytes
  std::string name;                    // the video file's name ("clip.mp4")
  std::string codec;                   // libavcodec's name ("h264")
  VideoStream stream;                  // a video kept as its stream; codec empty for a folder of JPEG frames
  bool is_stream() const { return !stream.codec.empty(); }
};

// The tables lookups read: the Store's own vectors, or a mapped tables file (tables_file.h).
struct TableSpans {
  std::span<const File> files;
  std::span<const Dir> dirs;
  std::span<const Piece> pieces;
  std::span<const uint32_t> child_dirs, child_files;
  std::span<const uint32_t> record_begin;  // records + 1 entries: index into record_files
  std::span<const uint32_t> record_files;
  std::string_view names;
};

class SqliteDb;
class MappedTables;

// Where a pack, merge or relayout into store folder `dir` left its temporary folder beside it
// (.NAME.tmp-PID, docs/FORMAT.md "Atomicity": killed before it completed, or writing now): a
// sentence for the user naming that folder; nullopt where there is none.
std::optional<std::string> unfinished_store_beside(const std::filesystem::path& dir);

class Store {
 public:
  // Loads STORE_DIR/index.sqlite and checks it; the error names the file and the reason.
  // With a `tables_dir`, the tables are mapped from a tables file there, made from the index
  // on the first open (tables_file.h); if that file cannot be made they stay in memory and
  // tables_problem() says why.
  static Result<std::unique_ptr<Store>> open(const std::filesystem::path& dir,
                                             const std::filesystem::path& tables_dir = {});
  // Loads an index file fetched from elsewhere (a remote store); messages name `location`
  // (the store's URL) instead of the local copy. path() is then empty.
  static Result<std::unique_ptr<Store>> open_index(const std::filesystem::path& index_file,
                                                   const std::string& location,
                                                   const std::filesystem::path& tables_dir = {});
  ~Store();
  Store(const Store&) = delete;

  // What pack said about the source, read from `index_file` on demand (a mount never needs it):
  // each blob's reason (files.note) and each skipped entry's (the skipped table), as (relative
  // path, reason), at most `limit` of each; the counts are of all of them.
  struct PackNotes {
    std::vector<std::pair<std::string, std::string>> blobs, skipped;
    uint64_t blob_count = 0, skipped_count = 0;
  };
  Result<PackNotes> pack_notes(const std::filesystem::path& index_file, size_t limit) const;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  // The folder or URL the store was opened from, for messages and the mount's fsname.
  const std::string& location() const { return location_; }
  int levels() const { return levels_; }
  // The store's format version (1 .. kFormatVersion).
  int format_version() const { return format_version_; }
  uint64_t seed() const { return seed_; }
  StoreLayout layout() const { return layout_; }
  // Where the store came from (meta keys; "" in stores packed before they existed).
  struct Provenance {
    std::string shard;          // "I/N"
    std::string source_digest;  // 16 hex digits
    std::string level_scripts;  // "pcr" or "fast"
  };
  const Provenance& provenance() const { return provenance_; }
  // The mapped tables file, or empty when the tables are in this process's memory.
  const std::filesystem::path& tables_file() const { return tables_file_; }
  // Why a tables file was not used although a tables_dir was given ("" otherwise).
  const std::string& tables_problem() const { return tables_problem_; }

  std::span<const File> files() const { return t_.files; }
  std::span<const Dir> dirs() const { return t_.dirs; }
  std::span<const Record> records() const { return records_; }
  std::span<const uint32_t> child_dirs() const { return t_.child_dirs; }
  std::span<const uint32_t> child_files() const { return t_.child_files; }
  std::string_view name(const File& f) const { return {t_.names.data() + f.name_off, f.name_len}; }
  std::string_view name(const Dir& d) const { return {t_.names.data() + d.name_off, d.name_len}; }
  std::span<const Piece> pieces(const File& f) const { return t_.pieces.subspan(f.first_piece, f.piece_count); }
  // The files stored in record r, in slot (storage) order.
  std::span<const uint32_t> record_files(uint32_t r) const {
    return t_.record_files.subspan(t_.record_begin[r], t_.record_begin[r + 1] - t_.record_begin[r]);
  }
  // The runs of clip frames, in record and slot order (their ids), and the one holding f (null
  // when f is no clip's frame).
  std::span<const ClipRun> clip_runs() const { return clips_; }
  const ClipRun* clip_of(const File& f) const;
  // The clip folders made from videos, by folder id, and the one of folder `dir` (null if none).
  std::span<const VideoSource> videos() const { return videos_; }
  const VideoSource* video_of(uint32_t dir) const;
  // The file holding frame f's GOP piece (f itself when it starts its GOP).
  const File& gop_of(const File& f) const { return t_.files[f.id - f.script]; }
  // A file's position in storage order: the files of earlier records, then its slot.
  uint64_t storage_position(const File& f) const { return t_.record_begin[f.record] + f.slot; }

  // Path relative to the store root ("cls/img.jpg"); for messages and order files.
  std::string relative_path(const File& f) const;
  std::string relative_path(const Dir& d) const;

  // index::pieces_at_level and the bytes a read of the file at `level` returns (its pieces at
  // that level, then level_trailer).
  uint32_t pieces_at_level(const File& f, int level) const;
  uint64_t size_at_level(const File& f, int level) const;

  // The bytes of the records that no file's piece holds (format 6: the old bytes of files an
  // append replaced), record headers aside; 0 in a store without them.
  uint64_t unreferenced_bytes() const;

 private:
  Store();
  static std::unique_ptr<Store> load(const std::filesystem::path& dir,
                                     const std::filesystem::path& tables_dir);  // throws StoreError (store_load.cpp)
  // The tables from `tables_dir`'s tables file if it matches the index, else load_index (then
  // the file is made and mapped). Throws StoreError.
  void load_tables(const std::filesystem::path& index_file, const std::string& display,
                   const std::filesystem::path& tables_dir);
  // Loads the tables from an index file; messages name `display`. Throws StoreError.
  void load_index(const std::filesystem::path& index_file, const std::string& display);
  int64_t load_meta(SqliteDb& db, const std::string& display);
  void load_records(SqliteDb& db, const std::string& display);
  void load_dirs(SqliteDb& db, const std::string& display);
  void reserve_files(SqliteDb& db, const std::filesystem::path& index_file);
  void load_files(SqliteDb& db, const std::string& display, bool offsets_stored);
  void load_pieces(File& f, std::span<const uint8_t> blob, bool offsets_stored, const std::string& display);
  void link_children();
  // Throws StoreError naming the folder and the name that two of its entries share.
  void check_unique_names(const std::string& display) const;
  void list_record_files();
  // Points t_ at the vectors below.
  void view_vectors();
  // Format 6: the unreferenced table, checked against the records, then the files' slots made
  // 0..n-1 in each record around the unreferenced ones. Throws StoreError.
  void load_unreferenced(SqliteDb& db, const std::string& display);
  void close_slot_gaps(const std::string& display);
  // Format 2: the pieces' offsets from the records' layouts and the files' slots. Throws StoreError.
  void derive_offsets(const std::string& display);
  // Lays clip run c's pieces out by level from pos (a file record), advancing it. Throws StoreError.
  void place_clip_run(ClipRun& c, uint64_t& pos, uint64_t region_end, const std::string& display);
  // Format 5: the clips table, checked against the records and files. Throws StoreError.
  void load_clips(SqliteDb& db, const std::string& display);
  // The videos table where there is one, checked against the folders. Throws StoreError.
  void load_videos(SqliteDb& db, const std::string& display);
  // Frames against the video streams. Throws StoreError.
  void check_frames(const std::string& display);
  std::filesystem::path dir_;
  std::string location_;
  int levels_ = 0;
  int format_version_ = 0;
  uint64_t seed_ = 0;
  StoreLayout layout_ = StoreLayout::scan;
  Provenance provenance_;
  std::vector<Record> records_;
  std::vector<ClipRun> clips_;
  std::vector<VideoSource> videos_;  // by dir
  TableSpans t_;
  std::filesystem::path tables_file_;
  std::string tables_problem_;
  std::unique_ptr<MappedTables> mapped_;
  // The tables while loading from the index; emptied once a tables file is mapped.
  std::vector<File> files_;
  std::vector<Dir> dirs_;
  std::vector<uint32_t> child_dirs_, child_files_;
  std::vector<Piece> pieces_;
  std::string names_;
  std::vector<uint32_t> record_begin_;
  std::vector<uint32_t> record_files_;
  // While loading (format 6): the unreferenced rows, by record then slot; `files_before` is how
  // many of the record's files lie before it.
  struct Unreferenced {
    uint32_t record = 0, slot = 0, files_before = 0;
    std::vector<uint32_t> sizes;  // its pieces' sizes
  };
  std::vector<Unreferenced> unreferenced_;
  std::span<const Unreferenced> unreferenced_in(uint32_t record) const;
};

// Checksum used for every piece: low 32 bits of XXH3-64.
uint32_t piece_checksum(std::span<const uint8_t> bytes);

// How many leading bytes of `bytes`, record r's bytes from offset `from`, are checked: up to the
// start of a piece that runs past their end (or all of them), provided the bytes of the record's
// 16-byte header among them are the header the index implies, every piece wholly inside matches
// its checksum and none starts before `from` and ends inside; else 0. (Every byte of a record
// after its header is a file's piece, or in format 6 an unreferenced one's, which no read is
// served from and which is not checked here.)
uint64_t checked_len(const Store& store, uint32_t r, uint64_t from, std::span<const uint8_t> bytes);

}  // namespace fid::index
