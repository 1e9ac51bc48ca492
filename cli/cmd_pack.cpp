#include <glob.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/store_options.h"
#include "codec/jpeg.h"
#include "net/url.h"
#include "pack/append.h"
#include "pack/packer.h"
#include "pack/s3_jobs.h"
#include "sources/remote_source.h"
#include "video/video_frames.h"
#include "video/video_streams.h"

namespace fid::cli {

namespace {


// The sources as given, a quoted glob expanded (in sorted order), then the lines of --source-list.
fid::Result<std::vector<std::filesystem::path>> source_paths(const std::vector<std::string>& given,
                                                             const std::string& list_file) {
  std::vector<std::filesystem::path> out;
  for (const std::string& s : given) {
    std::error_code ec;
    if (s.find_first_of("*?[") == std::string::npos || std::filesystem::exists(s, ec)) {
      out.emplace_back(s);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(s.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (rc != 0) return fid::Error{ENOENT, fmt::format("{}: no file matches", s)};
  }
  if (!list_file.empty()) {
    std::ifstream in(list_file);
    if (!in) return fid::Error{errno, fmt::format("{}: cannot read the source list: {}", list_file, std::strerror(errno))};
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.emplace_back(line);
  }
  if (out.empty()) return fid::Error{EINVAL, "no source given (SRC or --source-list)"};
  return out;
}

// A source at s3:// or http(s)://, when that is what the only SRC names; null otherwise.
fid::Result<std::unique_ptr<sources::PackSource>> remote_source(const std::vector<std::string>& given,
                                                              const std::string& list_file,
                                                              const storage::StoreOptions& store_opts) {
  if (given.size() != 1 || !list_file.empty()) return std::unique_ptr<sources::PackSource>();
  fid::Result<net::StoreUrl> url = net::parse_store_url(given[0]);
  if (!url || !url->remote()) return std::unique_ptr<sources::PackSource>();
  return sources::make_remote_source(*url, store_opts);
}

// Where a pack reads and writes when that is not a local path.
struct PackRemote {
  std::unique_ptr<sources::PackSource> source;  // s3:// or http(s)://
  std::optional<net::StoreUrl> store;     // s3://
  storage::StoreOptions options;              // from -o
};

// What the command line names, the store last: s3:// and http(s):// sources and an s3:// store
// (reached with the -o options), else local paths; sets opt.sources and opt.store (a scratch
// path for an s3:// store). An error is the user's to fix.
fid::Result<PackRemote> resolve_locations(pack::PackOptions& opt, std::vector<std::string> args,
                                          const std::string& source_list, const std::vector<std::string>& store_opts) {
  PackRemote remote;
  fid::Result<config::Settings> settings = parse_store_location_options(store_opts);
  if (!settings) return std::move(settings).error();
  remote.options = store_options(*settings);
  opt.store = args.back();
  args.pop_back();
  // s3://BUCKET/PREFIX: built in a local scratch folder, uploaded as it is made.
  if (fid::Result<net::StoreUrl> url = net::parse_store_url(opt.store.string()); url && url->remote()) {
    if (url->kind != net::StoreUrl::Kind::s3)
      return fid::Error{EINVAL, fmt::format("{}: a store is written to a folder or to s3:// only", url->text)};
    remote.store = std::move(url).value();
    opt.store = pack::scratch_store("pack", *remote.store);
  }
  fid::Result<std::unique_ptr<sources::PackSource>> source = remote_source(args, source_list, remote.options);
  if (!source) return std::move(source).error();
  if (*source) {
    opt.sources = {args.front()};
    remote.source = std::move(source).value();
    return remote;
  }
  fid::Result<std::vector<std::filesystem::path>> named = source_paths(args, source_list);
  if (!named) return std::move(named).error();
  opt.sources = std::move(named).value();
  return remote;
}

// Up to kNotesShown lines of "KIND: PATH: REASON", then how many more (inspect lists them all).
void print_notes(const char* kind, const std::vector<std::pair<std::string, std::string>>& rows) {
  constexpr size_t kNotesShown = 20;
  for (size_t i = 0; i < rows.size() && i < kNotesShown; ++i) fmt::print("{}: {}: {}\n", kind, rows[i].first, rows[i].second);
  if (rows.size() > kNotesShown)
    fmt::print("{}: ... and {} more (`fidelityfs inspect STORE` lists them)\n", kind, rows.size() - kNotesShown);
}

int print_report(const pack::PackOptions& opt, const pack::PackReport& r, bool allow_skipped);

int run_pack(const pack::PackOptions& opt, PackRemote remote, const std::string& progress_mode, bool allow_skipped) {
  // What the options say is wrong is the user's to fix: a usage error, reported before any work.
  pack::PackIo io{std::move(remote.source), nullptr};
  if (fid::Result<std::filesystem::path> checked = pack::check_pack_options(opt, io); !checked) {
    fmt::print(stderr, "fidelityfs pack: {}\n", checked.error().message);
    return kExitUsage;
  }
  const std::atomic<bool>& cancel = cancel_on_interrupt();
  ProgressLine line(parse_progress_mode(progress_mode), "pack");
  auto progress = [&](const pack::PackProgress& p) {
    line.update(p.files_done, p.files_total, p.source_bytes_done, p.seconds);
  };
  const fid::Result<pack::PackReport> packed =
      remote.store ? pack::pack_to_s3(opt, std::move(io.source), *remote.store, remote.options, progress, cancel)
                   : pack::pack(opt, std::move(io), progress, cancel);
  line.finish();
  if (!packed) {  // the options were fine, so whatever stopped the pack is a runtime failure
    fmt::print(stderr, "fidelityfs pack: {}\n", packed.error().message);
    return kExitRuntime;
  }
  return print_report(opt, *packed, allow_skipped);
}

// The options a store fixes that the command line gave, as the store's meta says them; a
// --shard given (an append adds to a whole store) as the key "shard".
pack::GivenStoreOptions given_store_options(const CLI::App& cmd, const std::string& levels, const std::string& layout,
                                            const pack::PackOptions& opt) {
  pack::GivenStoreOptions given;
  if (cmd.get_option("--levels")->count() > 0) given.emplace_back("level_scripts", levels);
  if (cmd.get_option("--layout")->count() > 0) given.emplace_back("layout", layout);
  if (cmd.get_option("--record-bytes")->count() > 0) given.emplace_back("record_bytes", std::to_string(opt.record_bytes));
  if (cmd.get_option("--seed")->count() > 0) given.emplace_back("seed", std::to_string(opt.seed));
  if (cmd.get_option("--shard")->count() > 0) given.emplace_back("shard", pack::shard_text(opt.shard));
  return given;
}

// An append: the store's options (a conflicting one given is a usage error), then the pack of the
// new files into the store.
int run_append(pack::PackOptions& opt, PackRemote remote, const std::string& progress_mode, bool allow_skipped,
               const pack::GivenStoreOptions& given) {
  // On s3://, the store's index is fetched first: the options are taken from it.
  std::optional<pack::S3AppendTarget> target;
  if (remote.store) {
    fid::Result<pack::S3AppendTarget> opened = pack::open_s3_append(*remote.store, remote.options);
    if (!opened) {
      fmt::print(stderr, "fidelityfs pack: --append: {}\n", opened.error().message);
      return kExitRuntime;
    }
    target.emplace(std::move(opened).value());
  }
  const std::string store_name = target ? target->url.text : opt.store.string();
  if (fid::Status taken = pack::take_store_options(opt, given, target ? target->index_dir() : opt.store, store_name);
      !taken) {
    fmt::print(stderr, "fidelityfs pack: --append: {}\n", taken.error().message);
    return taken.error().code == EINVAL && taken.error().message.find("corrupt") == std::string::npos ? kExitUsage
                                                                                                       : kExitRuntime;
  }
  const std::atomic<bool>& cancel = cancel_on_interrupt();
  ProgressLine line(parse_progress_mode(progress_mode), "pack");
  auto progress = [&](const pack::PackProgress& p) {
    line.update(p.files_done, p.files_total, p.source_bytes_done, p.seconds);
  };
  const fid::Result<pack::AppendReport> appended =
      target ? pack::append_to_s3(*target, opt, std::move(remote.source), progress, cancel)
             : pack::append(opt, pack::PackIo{std::move(remote.source), nullptr}, progress, cancel);
  line.finish();
  if (!appended) {
    fmt::print(stderr, "fidelityfs pack: --append: {}\n", appended.error().message);
    return kExitRuntime;
  }
  const pack::AppendReport& a = *appended;
  fmt::print("appended to {}: files {} -> {}{}, records from {} on; wrote {:.1f} MB (new records and the index)\n",
             store_name, a.files_before, a.files_after,
             a.replaced > 0 ? fmt::format(" ({} replaced)", a.replaced) : std::string(), a.first_record,
             static_cast<double>(a.bytes_written) / 1e6);
  return print_report(opt, a.pack, allow_skipped);
}

int print_report(const pack::PackOptions& opt, const pack::PackReport& r, bool allow_skipped) {
  uint64_t files = r.jpeg + r.l3 + r.blob + r.stream_frames;
  const std::string frames = r.stream_frames ? fmt::format(", {} frame", r.stream_frames) : "";
  fmt::print("packed {} files ({} jpeg, {} l3, {} blob{}) in {} folders into {} records, {:.1f}s ({:.0f} files/s)\n",
             files, r.jpeg, r.l3, r.blob, frames, r.dirs, r.records, r.seconds,
             r.seconds > 0 ? static_cast<double>(files) / r.seconds : 0.0);
  fmt::print("source {:.1f} MB, store {:.1f} MB\n", static_cast<double>(r.source_bytes) / 1e6, static_cast<double>(r.store_bytes) / 1e6);
  if (r.jpeg > 0) {
    fmt::print("jpeg bytes by level (fraction of full):");
    for (size_t k = 0; k < r.bytes_by_level.size(); ++k)
      fmt::print(" {}:{:.3f}", k + 1, static_cast<double>(r.bytes_by_level[k]) / static_cast<double>(r.bytes_by_level.back()));
    fmt::print("\n");
  }
  if (r.clips > 0)
    fmt::print("clips: {} folders of frames ({} files), each kept together in the storage order\n", r.clips, r.clip_frames);
  if (r.l3 > 0)
    fmt::print("l3: {:.1f} MB from {:.1f} MB of lossless sources ({:.3f} of the sources)\n",
               static_cast<double>(r.l3_bytes) / 1e6, static_cast<double>(r.l3_source_bytes) / 1e6,
               r.l3_source_bytes ? static_cast<double>(r.l3_bytes) / static_cast<double>(r.l3_source_bytes) : 0.0);
  if (r.videos.videos > 0 && opt.video_streams)
    fmt::print("videos: {} ({:.1f} MB) kept as streams of {} frames: {:.1f} MB, {:.2f}x the videos ({})\n",
               r.videos.videos, static_cast<double>(r.videos.video_bytes) / 1e6, r.videos.frames,
               static_cast<double>(r.videos.frame_bytes) / 1e6,
               r.videos.video_bytes ? static_cast<double>(r.videos.frame_bytes) / static_cast<double>(r.videos.video_bytes) : 0.0,
               opt.video_streams->gop ? fmt::format("re-encoded, a keyframe every {} frames", opt.video_streams->gop)
                                      : std::string("the sources' own GOPs"));
  else if (r.videos.videos > 0)
    fmt::print("videos: {} ({:.1f} MB) into {} frames ({:.1f} MB of JPEGs at quality {}, before levels)\n", r.videos.videos,
               static_cast<double>(r.videos.video_bytes) / 1e6, r.videos.frames,
               static_cast<double>(r.videos.frame_bytes) / 1e6, opt.video_frames ? opt.video_frames->quality : 0);
  if (r.videos.videos > 0 && r.videos.video_bytes > 0 && opt.video_frames) {
    fmt::print("video frames by level (bytes stored, over the videos' bytes):");
    for (size_t k = 0; k < r.frame_bytes_by_level.size(); ++k)
      fmt::print(" {}:{:.2f}", k + 1, static_cast<double>(r.frame_bytes_by_level[k]) / static_cast<double>(r.videos.video_bytes));
    fmt::print("\n");
  }
  print_notes("blob", r.blobbed);
  print_notes("video cut short", r.videos.cut_short);
  print_notes("video re-encoded", r.videos.reencoded);
  print_notes("skipped", r.skipped);
  if (!r.skipped.empty() && !allow_skipped) {
    fmt::print(stderr,
               "fidelityfs pack: {} source entr{} skipped (listed above), the store holds the rest; "
               "--allow-skipped accepts that with exit 0\n",
               r.skipped.size(), r.skipped.size() == 1 ? "y was" : "ies were");
    return kExitRuntime;
  }
  return kExitOk;
}

// --levels, --layout and --clips: how the store lays out what it holds.
void add_store_shape_options(CLI::App* cmd, std::string& levels, std::string& layout, std::string& clips) {
  cmd->add_option("--levels", levels,
                  "scan scripts of the JPEG levels: pcr (libjpeg's standard progression, the best quality "
                  "for the bytes at low levels) or fast (decodes faster, for loaders bound by their CPU)")
      ->transform(one_of({"pcr", "fast"}))
      ->capture_default_str();
  cmd->add_option("--layout", layout,
                  "where a JPEG's levels lie: scan (each record's files level by level: a record up to level k "
                  "is one read of its prefix, best for published orders) or file (each file's levels back "
                  "to back: a file at any level is one read, best for shuffled reads of a store larger than "
                  "the cache)")
      ->transform(one_of({"scan", "file"}))
      ->capture_default_str();
  cmd->add_option("--clips", clips,
                  "which folders are clips, a video's frames kept together and read in one request: auto (numbered "
                  "JPEGs of one size, as rawframes: 00001.jpg ..., img_00001.jpg ...), off, or a glob of folder paths")
      ->capture_default_str();
}

void add_append_options(CLI::App* cmd, bool& append, bool& replace) {
  CLI::Option* append_opt =
      cmd->add_flag("--append", append,
                    "add the sources' files to the existing store STORE (a folder or s3://BUCKET/PREFIX) as new "
                    "records and a new index, nothing there rewritten; levels, layout, record size and seed are the "
                    "store's");
  cmd->add_flag("--replace", replace,
                "with --append: a source file at a path the store has replaces the store's file (its old bytes stay "
                "in their record, unreferenced, until a relayout)")
      ->needs(append_opt);
}

// --video-frames and --video-streams, as given.
struct VideoOptionTexts {
  std::string frames, streams;
  CLI::Option* frames_opt = nullptr;
  CLI::Option* streams_opt = nullptr;
};

void add_video_options(CLI::App* cmd, VideoOptionTexts& v) {
  v.frames_opt = cmd->add_option("--video-frames", v.frames,
                                 "decode videos (.mp4 .webm .mkv .avi .mov) into clip folders of JPEG frames, "
                                 "VIDEO/img_00001.jpg ...; optional fps=N,short_side=S,quality=Q (default: the video's "
                                 "frames and size, quality 95)")
                     ->expected(0, 1);
  v.streams_opt = cmd->add_option("--video-streams", v.streams,
                                  "keep videos (.mp4 .webm .mkv .avi .mov) as their compressed streams, GOP by GOP; a "
                                  "mount shows VIDEO/img_00001.ppm ... as decoded pixels; optional "
                                  "gop=N|source,crf=C,short_side=S,fps=F,max_frames=M (default gop=16: re-encoded "
                                  "H.264, a keyframe every 16 frames; source: the source's own packets)")
                      ->expected(0, 1)
                      ->excludes(v.frames_opt);
}

// The video options into opt; false (the message printed) when they are wrong.
bool take_video_options(const VideoOptionTexts& v, pack::PackOptions& opt) {
  const bool frames = v.frames_opt->count() > 0;
  if (!frames && v.streams_opt->count() == 0) return true;
  const std::string& text = frames ? v.frames : v.streams;
  const char* name = frames ? "--video-frames" : "--video-streams";
  fid::Status parsed;
  if (frames) {
    fid::Result<video::FramesOptions> o = video::parse_frames_options(text);
    if (o) opt.video_frames = *o; else parsed = std::move(o).error();
  } else {
    fid::Result<video::StreamOptions> o = video::parse_stream_options(text);
    if (o) opt.video_streams = *o; else parsed = std::move(o).error();
  }
  if (!parsed)
    fmt::print(stderr, "fidelityfs pack: {} {}{}\n", name, parsed.error().message,
               text.find('=') == std::string::npos
                   ? fmt::format(" (a path after {0} is taken as its options: write the paths first, or {0}=)", name)
                   : "");
  return static_cast<bool>(parsed);
}

}  // namespace

void register_pack(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("pack", "Pack an image folder tree, tar files or objects into a store");
  auto opt = std::make_shared<pack::PackOptions>();
  auto progress = std::make_shared<std::string>("auto");
  auto sources = std::make_shared<std::vector<std::string>>();
  auto source_list = std::make_shared<std::string>();
  // One list: CLI11 gives a vector positional every argument, so the store is split off its end.
  cmd->add_option("SRC... STORE_DIR", *sources,
                  "the sources, then the store to create: a folder (absent, or empty) or s3://BUCKET/PREFIX. A "
                  "source is a folder (an ImageFolder tree), tar files (.tar, .tar.gz, .tar.zst; a quoted glob "
                  "such as 'shards/*.tar' is expanded), s3://BUCKET/PREFIX or an http(s):// folder")
      ->required()
      ->expected(1, CLI::detail::expected_max_vector_size);
  cmd->add_option("--source-list", *source_list, "a file naming tar files, one per line (more sources)");
  cmd->add_flag("--expand-inner-tars", opt->expand_inner_tars,
                "a member NAME.tar of a tar source becomes the folder NAME holding its members");
  cmd->add_option("--jobs", opt->jobs, "worker threads (default: all cores)")->check(whole_number(1, 1024));
  cmd->add_option("--record-bytes", opt->record_bytes, "target record size at full level")
      ->default_val(opt->record_bytes)
      ->transform(byte_size());
  add_u64_option(cmd, "--seed", opt->seed, "seed of the storage order (default 0)");
  auto levels = std::make_shared<std::string>("pcr");
  auto layout = std::make_shared<std::string>("file");
  auto clips = std::make_shared<std::string>("auto");
  add_store_shape_options(cmd, *levels, *layout, *clips);
  auto video = std::make_shared<VideoOptionTexts>();
  add_video_options(cmd, *video);
  auto shard = std::make_shared<std::string>("0/1");
  cmd->add_option("--shard", *shard,
                  "I/N: pack only part I of N of the source (the files whose path hashes to I; every folder), "
                  "for `fidelityfs merge`")
      ->capture_default_str();
  auto store_opts = std::make_shared<std::vector<std::string>>();
  cmd->add_option("-o", *store_opts,
                  "for s3:// and http(s):// sources and s3:// stores: endpoint=URL, region=, profile=, addressing=, "
                  "ca_file=, remote_requests=");
  cmd->add_option("--progress", *progress, "progress line: auto (on a terminal), on, off")
      ->transform(one_of({"auto", "on", "off"}));
  auto allow_skipped = std::make_shared<bool>(false);
  cmd->add_flag("--allow-skipped", *allow_skipped,
                "exit 0 although source entries were skipped (unreadable, links, ...; else exit 1, the store "
                "written without them)");
  auto append = std::make_shared<bool>(false);
  add_append_options(cmd, *append, opt->replace);
  cmd->callback([cmd, opt, progress, levels, layout, clips, video, shard, sources, source_list, store_opts,
                 allow_skipped, append, &exit_code] {
    opt->levels = *levels == "fast" ? codec::LevelScripts::fast : codec::LevelScripts::pcr;
    if (!take_video_options(*video, *opt)) {
      exit_code = kExitUsage;
      return;
    }
    if (!pack::parse_clip_rule(*clips, opt->clips)) {
      fmt::print(stderr, "fidelityfs pack: --clips: expected auto, off or a glob of folders\n");
      exit_code = kExitUsage;
      return;
    }
    (void)index::parse_layout(*layout, opt->layout);  // checked by one_of
    fid::Result<pack::Shard> part = pack::parse_shard(*shard);
    if (!part) {
      fmt::print(stderr, "fidelityfs pack: {}\n", part.error().message);
      exit_code = kExitUsage;
      return;
    }
    opt->shard = *part;
    fid::Result<PackRemote> remote = resolve_locations(*opt, *sources, *source_list, *store_opts);
    if (!remote) {
      fmt::print(stderr, "fidelityfs pack: {}\n", remote.error().message);
      exit_code = kExitUsage;
      return;
    }
    exit_code = *append ? run_append(*opt, std::move(remote).value(), *progress, *allow_skipped,
                                     given_store_options(*cmd, *levels, *layout, *opt))
                        : run_pack(*opt, std::move(remote).value(), *progress, *allow_skipped);
  });
}

}  // namespace fid::cli
