#include <filesystem>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/store_options.h"
#include "net/url.h"
#include "pack/merge.h"
#include "pack/s3_jobs.h"
#include "pack/temp_store.h"

namespace fid::cli {

namespace {

namespace fs = std::filesystem;

int print_merged(const pack::MergeReport& r) {
  fmt::print("merged {} parts: {} files in {} folders, {} records, {} skipped, {:.1f}s\n", r.parts, r.files, r.dirs,
             r.records, r.skipped, r.seconds);
  return kExitOk;
}

int run_local_merge(const std::vector<std::string>& args) {
  // The target is the user's to fix (a usage error, as for pack); whatever the parts say is a
  // runtime failure.
  if (fid::Result<fs::path> checked = pack::check_store_target(args.back()); !checked) {
    fmt::print(stderr, "fidelityfs merge: {}\n", checked.error().message);
    return kExitUsage;
  }
  const std::vector<fs::path> parts(args.begin(), args.end() - 1);
  const fid::Result<pack::MergeReport> merged = pack::merge(parts, args.back(), cancel_on_interrupt());
  if (!merged) {
    fmt::print(stderr, "fidelityfs merge: {}\n", merged.error().message);
    return kExitRuntime;
  }
  return print_merged(*merged);
}

// The arguments as s3:// URLs when they all are; nullopt when none is; an error when some are
// and some not, or one is http(s):// (a server-side copy needs S3).
fid::Result<std::optional<std::vector<net::StoreUrl>>> s3_args(const std::vector<std::string>& args) {
  std::vector<net::StoreUrl> urls;
  for (const std::string& a : args) {
    fid::Result<net::StoreUrl> url = net::parse_store_url(a);
    if (!url) return std::move(url).error();
    if (url->kind == net::StoreUrl::Kind::http)
      return fid::Error{EINVAL, fmt::format("{}: parts and store must be local folders or s3:// (http(s):// cannot be written "
                                            "or copied on the server)", a)};
    if (url->remote()) urls.push_back(std::move(url).value());
  }
  if (urls.empty()) return std::optional<std::vector<net::StoreUrl>>();
  if (urls.size() != args.size())
    return fid::Error{EINVAL, "parts and store must be all local folders or all s3:// (records are hard-linked "
                              "locally, copied server-side on S3)"};
  for (size_t k = 0; k + 1 < urls.size(); ++k)  // the copies would overwrite the part's records
    if (net::same_store_location(urls[k], urls.back()))
      return fid::Error{EINVAL, fmt::format("{}: the store cannot be one of its parts", urls.back().text)};
  return std::optional<std::vector<net::StoreUrl>>(std::move(urls));
}

int run_merge(const std::vector<std::string>& args, const std::vector<std::string>& options) {
  fid::Result<std::optional<std::vector<net::StoreUrl>>> urls = s3_args(args);
  fid::Result<config::Settings> settings = parse_store_location_options(options);
  if (!urls || !settings) {
    fmt::print(stderr, "fidelityfs merge: {}\n", (!urls ? urls.error() : settings.error()).message);
    return kExitUsage;
  }
  if (!*urls) return run_local_merge(args);
  const fid::Result<pack::MergeReport> merged = pack::merge_on_s3(**urls, store_options(*settings), cancel_on_interrupt());
  if (!merged) {
    fmt::print(stderr, "fidelityfs merge: {}\n", merged.error().message);
    return kExitRuntime;
  }
  return print_merged(*merged);
}

}  // namespace

void register_merge(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("merge", "Merge the parts of a sharded pack (pack --shard I/N) into one store");
  auto args = std::make_shared<std::vector<std::string>>();
  cmd->add_option("PART... STORE", *args,
                  "every part of one sharded pack, then the store to create. Local: the store a folder (absent, "
                  "or empty) on the parts' filesystem, their records hard-linked, not copied. s3://BUCKET/PREFIX "
                  "(parts and store all on one endpoint, reached with one set of credentials): the records are "
                  "copied on the server, the index uploaded last")
      ->required()
      ->expected(2, CLI::detail::expected_max_vector_size);
  auto store_opts = std::make_shared<std::vector<std::string>>();
  cmd->add_option("-o", *store_opts, "for s3:// parts and store: endpoint=URL, region=, profile=, addressing=, ca_file=, "
                                     "remote_requests=");
  cmd->callback([args, store_opts, &exit_code] { exit_code = run_merge(*args, *store_opts); });
}

}  // namespace fid::cli
