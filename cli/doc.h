// The documents generated from the command line's own tables (CLI11's subcommands and options,
// config::mount_option_docs()), so that they cannot drift from what the binary parses:
// `fidelityfs doc man1|man8|mount-options|bash-completion` (a hidden subcommand, run by the
// build for the package) and the -o help of `fidelityfs mount`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace fid::cli {

// The -o help of `fidelityfs mount`: one line per option, "name=VALUES (DEFAULT)".
std::string mount_options_help();

void register_doc(CLI::App& app, int& exit_code);

}  // namespace fid::cli
