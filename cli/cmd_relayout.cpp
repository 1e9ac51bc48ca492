// `fidelityfs relayout STORE OUT --layout scan|file`: the same store in the other record layout
// (pack/relayout.h), from a folder, s3:// or http(s):// to a folder or s3://.
#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <optional>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/store_options.h"
#include "net/url.h"
#include "pack/relayout.h"
#include "pack/s3_jobs.h"
#include "storage/open_store.h"

namespace fid::cli {

namespace {

// Reads records whole through the store's source, all of a batch at once.
Status read_records(const index::Store& store, storage::RecordSource& source, std::span<const uint32_t> ids,
                    std::span<uint8_t* const> buffers) {
  std::vector<storage::PrefixRead> reads;
  for (size_t k = 0; k < ids.size(); ++k) reads.push_back({ids[k], store.records()[ids[k]].size, buffers[k], {}});
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  source.read_prefixes(reads, [&] {
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  for (const storage::PrefixRead& r : reads)
    if (!r.status.ok()) return r.status;
  return {};
}

int run_relayout(const std::string& location, const std::string& out, index::StoreLayout layout,
                 const std::vector<std::string>& options, const std::string& progress_mode) {
  int exit_code = kExitOk;
  std::optional<net::StoreUrl> target;
  if (Result<net::StoreUrl> url = net::parse_store_url(out); url && url->remote()) {
    if (url->kind != net::StoreUrl::Kind::s3) {
      fmt::print(stderr, "fidelityfs relayout: {}: a store is written to a folder or to s3:// only\n", url->text);
      return kExitUsage;
    }
    target = std::move(url).value();
  }
  // Writing a store over the one being read would destroy it before its records are read.
  if (Result<net::StoreUrl> from = net::parse_store_url(location), to = net::parse_store_url(out);
      from && to && net::same_store_location(*from, *to)) {
    fmt::print(stderr, "fidelityfs relayout: {}: is the store being relaid out ({}); write the new layout to another {}\n",
               out, location, to->remote() ? "prefix" : "folder");
    return kExitUsage;
  }
  // Whole records, once each, in order: through the page cache and its readahead. Ctrl-C stops
  // the remote requests too, on the wire or not.
  const std::atomic<bool>& cancel = cancel_on_interrupt();
  std::optional<storage::OpenedStore> opened =
      open_command_store("relayout", location, options, exit_code, /*direct_io=*/false, &cancel);
  if (!opened) return exit_code;
  const index::Store& store = *opened->store;
  if (Status allowed = pack::relayout_allowed(store); !allowed) {
    fmt::print(stderr, "fidelityfs relayout: {}; nothing was written\n", allowed.error().message);
    return kExitRuntime;
  }
  if (!opened->source->problems().empty()) {
    for (const std::string& p : opened->source->problems()) fmt::print(stderr, "damaged record: {}\n", p);
    fmt::print(stderr, "fidelityfs relayout: {}: the store has damaged records; nothing was written\n", location);
    return kExitRuntime;
  }
  pack::RelayoutIo io;
  io.index_file = opened->index_file;
  io.read_records = [&](std::span<const uint32_t> ids, std::span<uint8_t* const> buffers) {
    return read_records(store, *opened->source, ids, buffers);
  };
  std::optional<storage::StoreOptions> target_options;
  if (target) {
    Result<config::Settings> settings = parse_store_location_options(options);
    if (!settings) {  // open_command_store parsed the same list: not reached
      fmt::print(stderr, "fidelityfs relayout: {}\n", settings.error().message);
      return kExitUsage;
    }
    target_options = store_options(*settings);
  }
  ProgressLine line(parse_progress_mode(progress_mode), "relayout");
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  auto progress = [&](uint64_t n, uint64_t total) {
    bytes += store.records()[n - 1].size;
    line.update(n, total, bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  Result<pack::RelayoutReport> done =
      target ? pack::relayout_to_s3(store, layout, std::move(io), *target, *target_options, progress, cancel)
             : pack::relayout(store, layout, out, io, progress, cancel);
  line.finish();
  if (!done) {
    fmt::print(stderr, "fidelityfs relayout: {}\n", done.error().message);
    return kExitRuntime;
  }
  const pack::RelayoutReport& r = *done;
  fmt::print("relayout {} -> {} ({} layout): {} records ({} re-laid out), {:.1f} MB in {:.1f}s ({:.0f} MB/s)\n",
             store.location(), out, index::layout_name(layout), r.records, r.rewritten,
             static_cast<double>(r.bytes) / 1e6, r.seconds, r.seconds > 0 ? static_cast<double>(r.bytes) / 1e6 / r.seconds : 0.0);
  return kExitOk;
}

}  // namespace

void register_relayout(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("relayout", "Copy a store into the other record layout, without transcoding");
  auto location = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto layout = std::make_shared<std::string>();
  auto options = std::make_shared<std::vector<std::string>>();
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("STORE", *location, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("OUT", *out, "the new store: a folder (absent, or empty) or s3://BUCKET/PREFIX")->required();
  cmd->add_option("--layout", *layout, "the new store's layout: scan or file (docs/MOUNT.md, \"Which layout\")")
      ->required()
      ->transform(one_of({"scan", "file"}));
  cmd->add_option("-o", *options, "remote store options: endpoint=URL, region=, profile=, addressing=, ca_file=");
  cmd->add_option("--progress", *progress, "progress line: auto, on, off")->transform(one_of({"auto", "on", "off"}));
  cmd->callback([location, out, layout, options, progress, &exit_code] {
    index::StoreLayout l = index::StoreLayout::scan;
    (void)index::parse_layout(*layout, l);  // checked by one_of
    exit_code = run_relayout(*location, *out, l, *options, *progress);
  });
}

}  // namespace fid::cli
