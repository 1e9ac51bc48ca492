#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/ascii.h"
#include "codec/jpeg.h"
#include "index/format.h"
#include "index/store.h"
#include "cli/store_options.h"
#include "storage/open_store.h"

namespace fid::cli {

namespace {

using Notes = std::vector<std::pair<std::string, std::string>>;

nlohmann::json listed(const Notes& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [path, reason] : rows) a.push_back({{"path", path}, {"reason", reason}});
  return a;
}

// Text from the store (notes, paths, meta values) as the terminal may show it: control bytes
// escaped, so that none can move the cursor, retitle the window or forge a line.
std::string shown(std::string_view s) { return printable(s, 4096); }

void print_notes(const char* kind, const Notes& rows, uint64_t count) {
  for (const auto& [path, reason] : rows) fmt::print("{}: {}: {}\n", kind, shown(path), shown(reason));
  if (count > rows.size()) fmt::print("{}: ... and {} more\n", kind, count - rows.size());
}

// What inspect counts over the tables.
struct Summary {
  uint64_t by_kind[4] = {0, 0, 0, 0};  // by index::FileKind
  std::vector<uint64_t> bytes_by_level;
  uint64_t source_bytes = 0, store_bytes = 0;
  std::map<std::string, uint64_t> by_script;  // JPEGs per scan script (pcr or fast family)
  uint64_t clips = 0, clip_frames = 0, split_clips = 0;  // clips, their frames, those over 2+ records
  // Clip folders made from videos (pack --video-frames): the videos' bytes, and their frames'.
  uint64_t videos = 0, video_bytes = 0, video_frames = 0;
  std::vector<uint64_t> frame_bytes_by_level;
  // Videos kept as streams (pack --video-streams): the videos' bytes, their streams', their frames.
  uint64_t streams = 0, stream_source_bytes = 0, stream_bytes = 0, stream_frames = 0;
};

void count_videos(const index::Store& store, Summary& s) {
  s.frame_bytes_by_level.assign(static_cast<size_t>(store.levels()), 0);
  for (const index::VideoSource& v : store.videos()) {
    if (v.is_stream()) {
      ++s.streams;
      s.stream_source_bytes += v.source_size;
      s.stream_bytes += v.stream.stored_bytes;
      s.stream_frames += v.frames;
      continue;
    }
    ++s.videos;
    s.video_bytes += v.source_size;
    const index::Dir& d = store.dirs()[v.dir];
    for (uint32_t id : store.child_files().subspan(d.file_begin, d.file_count)) {
      const index::File& f = store.files()[id];
      ++s.video_frames;
      const int levels = f.kind == index::FileKind::jpeg ? store.levels() : 1;
      for (int k = 1; k <= store.levels(); ++k)
        s.frame_bytes_by_level[static_cast<size_t>(k - 1)] += store.size_at_level(f, std::min(k, levels));
    }
  }
}

Summary summarize(const index::Store& store, const std::filesystem::path& index_file) {
  Summary s;
  const int levels = store.levels();
  s.bytes_by_level.assign(static_cast<size_t>(levels), 0);
  for (const index::File& f : store.files()) {
    s.by_kind[static_cast<int>(f.kind)]++;
    s.source_bytes += f.source_size;
    if (f.kind != index::FileKind::jpeg) continue;
    s.by_script[codec::scan_script_name(f.script)]++;
    for (int k = 1; k <= levels; ++k) s.bytes_by_level[static_cast<size_t>(k - 1)] += store.size_at_level(f, k);
  }
  std::error_code ec;
  s.store_bytes = std::filesystem::file_size(index_file, ec);
  for (const index::Record& r : store.records()) s.store_bytes += r.size;
  const auto runs = store.clip_runs();
  bool continued = false;  // the run before continued a clip of the run before it
  for (size_t i = 0; i < runs.size(); ++i) {
    // A clip larger than a record goes on in the next record: its runs are consecutive rows.
    const bool continues = i > 0 && runs[i - 1].dir == runs[i].dir && runs[i - 1].record + 1 == runs[i].record;
    if (!continues) ++s.clips;
    else if (!continued) ++s.split_clips;
    continued = continues;
    s.clip_frames += runs[i].frames;
  }
  count_videos(store, s);
  return s;
}

void print_json(const index::Store& store, const Summary& s, const std::vector<std::string>& problems,
                const index::Store::PackNotes& notes, const std::vector<std::string>& leftovers) {
  nlohmann::json j;
  j["format_version"] = store.format_version();
  j["layout"] = index::layout_name(store.layout());
  j["files"] = store.files().size();
  j["dirs"] = store.dirs().size();
  j["by_kind"] = {{"jpeg", s.by_kind[0]}, {"l3", s.by_kind[1]}, {"blob", s.by_kind[2]}, {"frame", s.by_kind[3]}};
  j["video_streams"] = {{"videos", s.streams}, {"bytes", s.stream_source_bytes}, {"stored_bytes", s.stream_bytes},
                        {"frames", s.stream_frames}};
  j["levels"] = store.levels();
  j["bytes_by_level"] = s.bytes_by_level;
  j["jpeg_scripts"] = s.by_script;
  j["source_bytes"] = s.source_bytes;
  j["store_bytes"] = s.store_bytes;
  j["unreferenced_bytes"] = store.unreferenced_bytes();
  j["records"] = store.records().size();
  j["clips"] = {{"clips", s.clips}, {"frames", s.clip_frames}, {"runs", store.clip_runs().size()},
                {"split", s.split_clips}};
  j["videos"] = {{"videos", s.videos}, {"bytes", s.video_bytes}, {"frames", s.video_frames},
                 {"frame_bytes_by_level", s.videos ? s.frame_bytes_by_level : std::vector<uint64_t>{}}};
  j["seed"] = store.seed();
  const index::Store::Provenance& from = store.provenance();
  j["shard"] = from.shard;
  j["source_digest"] = from.source_digest;
  j["level_scripts"] = from.level_scripts;
  j["problems"] = problems;
  j["append_leftovers"] = leftovers;
  j["blobs"] = listed(notes.blobs);  // at most the notes asked for; *_count: all of them
  j["blob_count"] = notes.blob_count;
  j["skipped"] = listed(notes.skipped);
  j["skipped_count"] = notes.skipped_count;
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

void print_text(const index::Store& store, const Summary& s, const std::vector<std::string>& problems,
                const index::Store::PackNotes& notes, const std::vector<std::string>& leftovers) {
  fmt::print("store           {}\n", store.location());
  fmt::print("format version  {}\n", store.format_version());
  fmt::print("layout          {}\n", index::layout_name(store.layout()));
  fmt::print("files           {} (jpeg {}, l3 {}, blob {}, frame {}) in {} folders\n", store.files().size(),
             s.by_kind[0], s.by_kind[1], s.by_kind[2], s.by_kind[3], store.dirs().size());
  fmt::print("records         {}\n", store.records().size());
  if (s.clips > 0)
    fmt::print("clips           {} ({} frames; {} over more than one record, in consecutive ones)\n", s.clips,
               s.clip_frames, s.split_clips);
  const index::Store::Provenance& from = store.provenance();
  if (!from.shard.empty())
    fmt::print("packed          shard {}, source digest {}, levels {}, seed {}\n", shown(from.shard),
               shown(from.source_digest), shown(from.level_scripts), store.seed());
  fmt::print("source bytes    {}\n", s.source_bytes);
  fmt::print("store bytes     {}\n", s.store_bytes);
  if (const uint64_t gone = store.unreferenced_bytes(); gone > 0)
    fmt::print("unreferenced    {} bytes ({:.1f}% of the store) no file references: files an append replaced; a "
               "relayout reclaims them\n", gone, 100.0 * static_cast<double>(gone) / static_cast<double>(std::max<uint64_t>(1, s.store_bytes)));
  if (s.by_kind[0] > 0) {
    std::string scripts;
    for (const auto& [name, count] : s.by_script) scripts += fmt::format("{}{} {}", scripts.empty() ? "" : ", ", name, count);
    fmt::print("jpeg scripts    {}\n", scripts);
    fmt::print("jpeg levels     {} (bytes of all {} JPEGs at each level; quality gives a sample's with its scores)\n",
               store.levels(), s.by_kind[0]);
    for (int k = 1; k <= store.levels(); ++k) {
      uint64_t b = s.bytes_by_level[static_cast<size_t>(k - 1)];
      fmt::print("  level {:2}  {:>14} bytes  {:5.1f}% of full  {:8.1f} kB/image\n", k, b,
                 100.0 * static_cast<double>(b) / static_cast<double>(s.bytes_by_level.back()),
                 static_cast<double>(b) / 1e3 / static_cast<double>(s.by_kind[0]));
    }
  }
  if (s.videos > 0) {
    fmt::print("videos          {} ({} bytes) into {} frames (bytes of their frames at each level)\n", s.videos,
               s.video_bytes, s.video_frames);
    for (int k = 1; k <= store.levels(); ++k) {
      const uint64_t b = s.frame_bytes_by_level[static_cast<size_t>(k - 1)];
      fmt::print("  level {:2}  {:>14} bytes  {:6.2f}x the videos\n", k, b,
                 static_cast<double>(b) / static_cast<double>(std::max<uint64_t>(1, s.video_bytes)));
    }
  }
  if (s.streams > 0)
    fmt::print("video streams   {} ({} bytes) kept as streams of {} frames: {} bytes, {:.2f}x the videos\n", s.streams,
               s.stream_source_bytes, s.stream_frames, s.stream_bytes,
               static_cast<double>(s.stream_bytes) / static_cast<double>(std::max<uint64_t>(1, s.stream_source_bytes)));
  for (const std::string& p : problems) fmt::print("problem: {}\n", shown(p));
  print_append_leftovers(leftovers);
  print_notes("blob", notes.blobs, notes.blob_count);
  print_notes("skipped", notes.skipped, notes.skipped_count);
}

int run_inspect(const std::string& location, const std::vector<std::string>& options, bool json) {
  int exit_code = kExitOk;
  std::optional<storage::OpenedStore> opened = open_command_store("inspect", location, options, exit_code);
  if (!opened) return exit_code;
  constexpr size_t kNotesShown = 1000;
  fid::Result<index::Store::PackNotes> notes = opened->store->pack_notes(opened->index_file, kNotesShown);
  if (!notes) {
    fmt::print(stderr, "fidelityfs inspect: {}\n", notes.error().message);
    return kExitRuntime;
  }
  const Summary summary = summarize(*opened->store, opened->index_file);
  const std::vector<std::string> leftovers = append_leftovers(location, options, *opened->store);
  if (json) print_json(*opened->store, summary, opened->source->problems(), *notes, leftovers);
  else print_text(*opened->store, summary, opened->source->problems(), *notes, leftovers);
  return kExitOk;
}

}  // namespace

void register_inspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Summarise a store");
  auto location = std::make_shared<std::string>();
  auto options = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("STORE", *location, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("-o", *options, "remote store options: endpoint=URL, region=, profile=, addressing=, ca_file=");
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([location, options, json, &exit_code] { exit_code = run_inspect(*location, *options, *json); });
}

}  // namespace fid::cli
