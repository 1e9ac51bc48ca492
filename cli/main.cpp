#include <cstdio>

#include "cli/commands.h"
#include "cli/doc.h"
#include "cuda/gpu.h"

int main(int argc, char** argv) {
  CLI::App app{"fidelityfs: a packed image dataset mounted as a directory tree at a chosen fidelity"};
  app.require_subcommand(1);
  // Probing initialises CUDA, so only when asked (a mount forks later).
  app.set_version_flag("--version", [] {
    return std::string("fidelityfs ") + FIDELITYFS_VERSION + "\n" + fid::gpu::describe(fid::gpu::probe());
  });
  int exit_code = fid::cli::kExitOk;
  fid::cli::register_pack(app, exit_code);
  fid::cli::register_merge(app, exit_code);
  fid::cli::register_relayout(app, exit_code);
  fid::cli::register_inspect(app, exit_code);
  fid::cli::register_verify(app, exit_code);
  fid::cli::register_quality(app, exit_code);
  fid::cli::register_mount(app, exit_code);
  fid::cli::register_l3(app, exit_code);
  fid::cli::register_stats(app, exit_code);
  fid::cli::register_doc(app, exit_code);  // hidden
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : fid::cli::kExitUsage;
  }
  return exit_code;
}
