// Each subcommand of the fidelityfs binary lives in its own cli/cmd_*.cpp and registers itself
// on the root CLI11 app. A command's callback sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ascii.h"
#include "common/numbers.h"

namespace fid::cli {

// Exit codes of the command-line contract (README.md, "Commands").
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// An option holding a u64 (a seed): a whole number from 0 to 2^64 - 1, refused otherwise as a
// usage error naming the value (CLI11's own conversion wraps -1 and clamps larger numbers).
inline CLI::Option* add_u64_option(CLI::App* cmd, const std::string& name, uint64_t& target, const std::string& what) {
  return cmd
      ->add_option_function<std::string>(name, [&target](const std::string& s) { target = fid::parse_u64(s).value_or(0); },
                                         what)
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return fid::parse_u64(s) ? "" : "'" + s + "': expected a whole number from 0 to 18446744073709551615";
          },
          "UINT64"));
}

// A number above 0, refused in words otherwise (CLI11's PositiveNumber prints its range's upper
// bound, 300 digits of the largest double).
inline CLI::Validator above_zero(const std::string& unit) {
  return CLI::Validator(
      [unit](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != s.size() || s.empty()) return "'" + s + "' is not a number of " + unit;
        return v > 0 ? "" : "must be more than 0 " + unit + ", got " + s;
      },
      "> 0");
}

// One of `choices` in any case, turned into the choice as written here; refused in words
// otherwise. The description "{a,b}" is what the bash completion offers (cmd_doc.cpp).
inline CLI::Validator one_of(const std::vector<std::string>& choices) {
  std::string braces, words;
  for (const std::string& c : choices) {
    braces += (braces.empty() ? "" : ",") + c;
    words += (words.empty() ? "" : ", ") + c;
  }
  return CLI::Validator(
      [choices, words](std::string& s) -> std::string {
        for (const std::string& c : choices)
          if (fid::ascii_iequals(s, c)) {
            s = c;
            return "";
          }
        return "'" + fid::printable(s) + "' is not one of: " + words;
      },
      "{" + braces + "}");
}

// A whole number from `lo` to `hi`, refused in words otherwise.
inline CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::optional<uint64_t> v = fid::parse_u64(s);
        if (v && *v >= lo && *v <= hi) return "";
        return "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
               fid::printable(s) + "'";
      },
      std::to_string(lo) + ".." + std::to_string(hi));
}

// A size in bytes: a number, or one with a unit (64M, 1G, 512KiB; K, M, G are powers of 1024).
inline CLI::Validator byte_size() {
  const CLI::AsSizeValue sizes(false);
  return CLI::Validator(
      [sizes](std::string& s) -> std::string {
        const std::string given = s;
        try {
          if (sizes(s).empty()) return "";
        } catch (const CLI::ValidationError&) {  // CLI11 throws for an unknown unit
        }
        s = given;
        return "'" + fid::printable(given) + "' is not a size: a number of bytes, or one with a unit (64M, 1G, 512KiB)";
      },
      "SIZE");
}

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
