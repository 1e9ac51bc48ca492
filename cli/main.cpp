#include <cstdio>
#include <string>
#include <string_view>

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
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Every error names its subcommand, as the commands' own errors do.
    std::string command = "fidelityfs";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::fprintf(stderr, "%s: %s\n", command.c_str(), e.what());
    // "-o scan_group=5, threads=2": the shell split the list at the space.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) && std::string_view(e.what()).find('=') != std::string_view::npos)
      std::fprintf(stderr, "%s: a -o list is one argument: no spaces after its commas (-o a=1,b=2)\n", command.c_str());
    std::fprintf(stderr, "run '%s --help' for its options\n", command.c_str());
    return fid::cli::kExitUsage;
  }
  return exit_code;
}
