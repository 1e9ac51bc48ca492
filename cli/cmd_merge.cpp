#include <filesystem>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "index/merge.h"
#include "index/temp_store.h"

namespace fid::cli {

namespace {


int run_merge(const std::vector<std::string>& args) {
  // The target is the user's to fix (a usage error, as for pack); whatever the parts say is a
  // runtime failure.
  if (fid::Result<std::filesystem::path> checked = index::check_store_target(args.back()); !checked) {
    fmt::print(stderr, "fidelityfs merge: {}\n", checked.error().message);
    return kExitUsage;
  }
  const std::atomic<bool>& cancel = cancel_on_interrupt();
  const std::vector<std::filesystem::path> parts(args.begin(), args.end() - 1);
  const fid::Result<index::MergeReport> merged = index::merge(parts, args.back(), cancel);
  if (!merged) {
    fmt::print(stderr, "fidelityfs merge: {}\n", merged.error().message);
    return kExitRuntime;
  }
  fmt::print("merged {} parts: {} files in {} folders, {} records, {} skipped, {:.1f}s\n", merged->parts,
             merged->files, merged->dirs, merged->records, merged->skipped, merged->seconds);
  return kExitOk;
}

}  // namespace

void register_merge(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("merge", "Merge the parts of a sharded pack (pack --shard I/N) into one store");
  auto args = std::make_shared<std::vector<std::string>>();
  cmd->add_option("PART... STORE_DIR", *args,
                  "every part of one sharded pack, then the store to create (absent, or an empty folder) on the "
                  "parts' filesystem: their records are hard-linked, not copied")
      ->required()
      ->expected(2, CLI::detail::expected_max_vector_size);
  cmd->callback([args, &exit_code] { exit_code = run_merge(*args); });
}

}  // namespace fid::cli
