#include <sys/resource.h>

#include <cstdio>
#include <regex>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "cli/doc.h"
#include "cuda/gpu.h"

namespace {

// The deepest subcommand the parse reached (the root when none).
const CLI::App& parsed_command(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return parsed_command(*sub);
  return app;
}

// A parse error in words: CLI11's own texts where they are plain, rewritten where they are not.
std::string usage_message(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::string out;
    for (const std::string& a : parsed_command(app).remaining()) {
      out += out.empty() ? "" : "; ";
      out += (a.starts_with("-") ? "unknown option '" : "unexpected argument '") + fid::printable(a) + "'";
    }
    if (!out.empty()) return out;
  }
  if (app.get_subcommands().empty()) {  // no command: none given, or not one of them
    std::string commands;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
      commands += (commands.empty() ? "" : ", ") + sub->get_name();
    if (argc > 1 && argv[1][0] != '-')
      return "'" + fid::printable(argv[1]) + "' is not a command (commands: " + commands + ")";
    if (dynamic_cast<const CLI::RequiredError*>(&e)) return "a command is required: " + commands;
  }
  // "NAME: At least 2 required but received 1"
  static const std::regex at_least(R"(^(.*): At least (\d+) required but received (\d+)$)");
  if (std::smatch m; std::regex_match(what, m, at_least))
    return m[1].str() + ": needs at least " + m[2].str() + " arguments, got " + m[3].str();
  return what;
}

// A local store holds a descriptor open for each record (two once it is read with O_DIRECT): under
// a soft limit of 1024, a shell's or a service's default, the records past it would read as EIO
// (mount, verify, relayout, quality). The hard limit is the process's to take (nothing here uses
// select(2), which stops at 1024).
void raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

int main(int argc, char** argv) {
  raise_open_files_limit();
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
    std::fprintf(stderr, "%s: %s\n", command.c_str(), usage_message(app, e, argc, argv).c_str());
    // "-o scan_group=5, threads=2": the shell split the list at the space.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) && std::string_view(e.what()).find('=') != std::string_view::npos)
      std::fprintf(stderr, "%s: a -o list is one argument: no spaces after its commas (-o a=1,b=2)\n", command.c_str());
    std::fprintf(stderr, "run '%s --help' for its options\n", command.c_str());
    return fid::cli::kExitUsage;
  }
  return exit_code;
}
