// Each subcommand of the fidelityfs binary lives in its own cli/cmd_*.cpp and registers itself
// on the root CLI11 app. A command's callback sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace fid::cli {

// Exit codes of the command-line contract (README.md, "Commands").
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

void register_pack(CLI::App& app, int& exit_code);
void register_merge(CLI::App& app, int& exit_code);
void register_relayout(CLI::App& app, int& exit_code);
void register_inspect(CLI::App& app, int& exit_code);
void register_verify(CLI::App& app, int& exit_code);
void register_mount(CLI::App& app, int& exit_code);
void register_l3(CLI::App& app, int& exit_code);
void register_quality(CLI::App& app, int& exit_code);
void register_stats(CLI::App& app, int& exit_code);

}  // namespace fid::cli
