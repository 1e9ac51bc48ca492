#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress.h"
#include "codec/jpeg.h"
#include "index/packer.h"

namespace fid::cli {

namespace {

std::atomic<bool> g_cancel{false};
extern "C" void on_pack_signal(int) { g_cancel = true; }

int run_pack(const index::PackOptions& opt, const std::string& progress_mode) {
  // What the options say is wrong is the user's to fix: a usage error, reported before any work.
  if (fid::Result<std::filesystem::path> checked = index::check_pack_options(opt); !checked) {
    fmt::print(stderr, "fidelityfs pack: {}\n", checked.error().message);
    return kExitUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = on_pack_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  ProgressLine line(parse_progress_mode(progress_mode), "pack");
  auto run = [&]() -> fid::Result<index::PackReport> {
    try {
      return index::pack(
          opt, [&](const index::PackProgress& p) { line.update(p.files_done, p.files_total, p.source_bytes_done, p.seconds); },
          g_cancel);
    } catch (const std::exception& e) {  // out of memory, ...: the store is removed all the same
      return fid::Error{EIO, e.what()};
    }
  };
  const fid::Result<index::PackReport> packed = run();
  line.finish();
  if (!packed) {  // the options were fine, so whatever stopped the pack is a runtime failure
    fmt::print(stderr, "fidelityfs pack: {}\n", packed.error().message);
    return kExitRuntime;
  }
  const index::PackReport& r = *packed;
  uint64_t files = r.jpeg + r.l3 + r.blob;
  fmt::print("packed {} files ({} jpeg, {} l3, {} blob) in {} folders into {} records, {:.1f}s ({:.0f} files/s)\n",
             files, r.jpeg, r.l3, r.blob, r.dirs, r.records, r.seconds, r.seconds > 0 ? static_cast<double>(files) / r.seconds : 0.0);
  fmt::print("source {:.1f} MB, store {:.1f} MB\n", static_cast<double>(r.source_bytes) / 1e6, static_cast<double>(r.store_bytes) / 1e6);
  if (r.jpeg > 0) {
    fmt::print("jpeg bytes by level (fraction of full):");
    for (size_t k = 0; k < r.bytes_by_level.size(); ++k)
      fmt::print(" {}:{:.3f}", k + 1, static_cast<double>(r.bytes_by_level[k]) / static_cast<double>(r.bytes_by_level.back()));
    fmt::print("\n");
  }
  if (r.l3 > 0)
    fmt::print("l3: {:.1f} MB from {:.1f} MB of lossless sources ({:.3f} of the sources)\n",
               static_cast<double>(r.l3_bytes) / 1e6, static_cast<double>(r.l3_source_bytes) / 1e6,
               r.l3_source_bytes ? static_cast<double>(r.l3_bytes) / static_cast<double>(r.l3_source_bytes) : 0.0);
  for (auto& [path, why] : r.blobbed) fmt::print("blob: {}: {}\n", path, why);
  for (auto& [path, why] : r.skipped) fmt::print("skipped: {}: {}\n", path, why);
  return kExitOk;
}

}  // namespace

void register_pack(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("pack", "Pack an image folder tree into a store");
  auto opt = std::make_shared<index::PackOptions>();
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("SRC_DIR", opt->source, "source folder (an ImageFolder tree)")->required();
  cmd->add_option("STORE_DIR", opt->store, "store to create (must not exist, or be empty)")->required();
  cmd->add_option("--jobs", opt->jobs, "worker threads (default: all cores)")->check(CLI::Range(1u, 1024u));
  cmd->add_option("--record-bytes", opt->record_bytes, "target record size at full level")
      ->default_val(opt->record_bytes)
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--seed", opt->seed, "seed of the storage order")->default_val(0);
  auto levels = std::make_shared<std::string>("pcr");
  cmd->add_option("--levels", *levels,
                  "scan scripts of the JPEG levels: pcr (libjpeg's standard progression, the best quality "
                  "for the bytes at low levels) or fast (decodes faster, for loaders bound by their CPU)")
      ->check(CLI::IsMember({"pcr", "fast"}))
      ->capture_default_str();
  cmd->add_option("--progress", *progress, "progress line: auto (on a terminal), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->callback([opt, progress, levels, &exit_code] {
    opt->levels = *levels == "fast" ? codec::LevelScripts::fast : codec::LevelScripts::pcr;
    exit_code = run_pack(*opt, *progress);
  });
}

}  // namespace fid::cli
