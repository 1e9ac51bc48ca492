#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include "cli/commands.h"
#include "common/ascii.h"
#include "cli/parallel.h"
#include "cli/progress.h"
#include "index/store.h"
#include "cli/store_options.h"
#include "cli/verify_file.h"
#include "storage/open_store.h"

namespace fid::cli {

namespace {

int run_verify(const std::string& location, const std::vector<std::string>& options, unsigned jobs,
               const std::string& progress_mode) {
  int exit_code = kExitOk;
  std::optional<storage::OpenedStore> opened = open_command_store("verify", location, options, exit_code);
  if (!opened) return exit_code;
  const index::Store& store = *opened->store;
  storage::RecordSource& source = *opened->source;
  auto files = store.files();
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> bad;
  ProgressLine line(parse_progress_mode(progress_mode), "verify");
  const auto t0 = std::chrono::steady_clock::now();
  for_each_parallel(
      files.size(), jobs,
      [&](size_t i, std::vector<uint8_t>& buf) -> uint64_t {
        std::string why = verify_file(store, source, files[i], buf);
        if (!why.empty()) {
          std::lock_guard lock(mu);
          bad.emplace_back(store.relative_path(files[i]), why);
        }
        return buf.size();
      },
      line);
  std::sort(bad.begin(), bad.end());
  // Paths and causes hold the store's text: escaped, so that none can steer the terminal.
  for (const std::string& p : source.problems()) fmt::print(stderr, "damaged record: {}\n", printable(p, 4096));
  for (auto& [path, why] : bad) fmt::print(stderr, "BAD {}: {}\n", printable(path, 4096), printable(why, 4096));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("verified {} files, {} bad, {:.1f}s\n", files.size(), bad.size(), secs);
  print_append_leftovers(append_leftovers(location, options, store));
  return bad.empty() && source.problems().empty() ? kExitOk : kExitRuntime;
}

}  // namespace

void register_verify(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("verify", "Check every checksum and decode every JPEG at every level");
  auto location = std::make_shared<std::string>();
  auto options = std::make_shared<std::vector<std::string>>();
  auto jobs = std::make_shared<unsigned>(0);
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("STORE", *location, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("-o", *options, "remote store options: endpoint=URL, region=, profile=, addressing=, ca_file=");
  cmd->add_option("--jobs", *jobs, "worker threads (default: all cores)");
  cmd->add_option("--progress", *progress, "progress line: auto, on, off")->transform(one_of({"auto", "on", "off"}));
  cmd->callback([location, options, jobs, progress, &exit_code] {
    exit_code = run_verify(*location, *options, *jobs, *progress);
  });
}

}  // namespace fid::cli
