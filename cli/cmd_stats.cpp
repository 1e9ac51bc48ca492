// fidelityfs stats MOUNT [--watch SECONDS] [--count N]
//
// A one-screen summary of a mount for a person at a terminal, from its /.fidelity/stats and
// /.fidelity/config: totals since the mount started, or with --watch one line of rates per
// interval, as iostat prints them.
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"

namespace fid::cli {

namespace {

void err(const std::string& msg) { fmt::print(stderr, "fidelityfs stats: {}\n", msg); }

// The JSON object of MOUNT/.fidelity/NAME.
Result<nlohmann::json> read_control(const std::string& mount, const char* name) {
  const std::string path = mount + "/.fidelity/" + name;
  std::ifstream in(path);
  if (!in) return Error{errno ? errno : EIO, fmt::format("{}: not a fidelityfs mount (cannot read {})", mount, path)};
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{EINVAL, fmt::format("{}: {} is not the JSON of a fidelityfs mount", mount, path)};
  return j;
}

// The mount's stats and config, read one after the other.
struct Snapshot {
  nlohmann::json stats, config;
};
Result<Snapshot> read_snapshot(const std::string& mount) {
  Result<nlohmann::json> stats = read_control(mount, "stats");
  if (!stats) return std::move(stats).error();
  Result<nlohmann::json> config = read_control(mount, "config");
  if (!config) return std::move(config).error();
  return Snapshot{std::move(stats).value(), std::move(config).value()};
}

uint64_t count(const nlohmann::json& j, const char* key) { return j.value(key, uint64_t{0}); }
uint64_t count(const nlohmann::json& j, const char* object, const char* key) {
  return j.contains(object) && j[object].is_object() ? count(j[object], key) : 0;
}
uint64_t tree_reads(const nlohmann::json& s) {
  uint64_t n = 0;
  if (s.contains("reads_by_kind"))
    for (const auto& [kind, v] : s["reads_by_kind"].items()) n += v.get<uint64_t>();
  return n;
}
double ratio(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0; }
std::string percent(uint64_t part, uint64_t whole) { return whole ? fmt::format("{:.1f}%", ratio(part, whole)) : "-"; }

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u ? fmt::format("{:.1f} {}", b, units[u]) : fmt::format("{:.0f} B", b);
}

std::string duration_text(uint64_t s) {
  if (s >= 86400) return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}m{:02}s", s / 60, s % 60);
}

void print_summary(const std::string& mount, const nlohmann::json& s, const nlohmann::json& c) {
  const uint64_t reads = tree_reads(s), hits = count(s, "cache_hits"), misses = count(s, "cache_misses");
  fmt::print("{}  store {} ({} layout)  up {}  pid {}\n", mount, s.value("store", std::string("?")),
             s.value("layout", std::string("scan")), duration_text(count(s, "uptime_s")), count(s, "pid"));
  fmt::print("level     default {} of {}, {} overrides, {} level changes ({} refused: level_changes={})\n",
             c.value("effective_default_level", 0), count(s, "levels"), count(s, "overrides"), count(s, "level_changes"),
             count(s, "level_changes_refused"), c.value("level_changes", std::string("owner")));
  fmt::print("reads     {} (jpeg {}, l3 {}, blob {}), {} served\n", reads, count(s, "reads_by_kind", "jpeg"),
             count(s, "reads_by_kind", "l3"), count(s, "reads_by_kind", "blob"),
             bytes_text(static_cast<double>(count(s, "bytes_served"))));
  std::string by_level;
  if (s.contains("jpeg_reads_by_level"))
    for (size_t k = 0; k < s["jpeg_reads_by_level"].size(); ++k)
      if (uint64_t n = s["jpeg_reads_by_level"][k].get<uint64_t>()) by_level += fmt::format("{}{}: {}", by_level.empty() ? "" : ", ", k + 1, n);
  if (!by_level.empty()) fmt::print("by level  {}\n", by_level);
  fmt::print("storage   {} in {} requests, {} retries\n", bytes_text(static_cast<double>(count(s, "storage_bytes"))),
             count(s, "storage_reads"), count(s, "storage_retries"));
  // Reads of views and empty reads need no stored bytes: the cache counts the others.
  fmt::print("cache     {} hits ({} of {} reads that needed stored bytes), {} of {}, {} evictions\n",
             percent(hits, hits + misses), hits, hits + misses, bytes_text(static_cast<double>(count(s, "cache", "used"))),
             bytes_text(static_cast<double>(count(s, "cache", "budget"))), count(s, "cache", "evictions"));
  if (s.contains("random_reads") && s["random_reads"].is_object())
    fmt::print("random    {}\n", s["random_reads"].value("why", std::string("?")));  // it starts with the mode
  if (s.contains("disk_cache") && s["disk_cache"].is_object()) {
    const uint64_t dh = count(s, "disk_cache", "hits"), dm = count(s, "disk_cache", "misses");
    fmt::print("disk      {} hits ({} of {}), {} of {}, {} evictions\n", percent(dh, dh + dm), dh, dh + dm,
               bytes_text(static_cast<double>(count(s, "disk_cache", "used"))),
               bytes_text(static_cast<double>(count(s, "disk_cache", "max"))), count(s, "disk_cache", "evictions"));
  }
  fmt::print("errors    {} EIO in {} files\n", count(s, "eio_errors"), count(s, "eio_files"));
}

constexpr const char* kHeader = "    time    reads/s      MB/s  store MB/s  store req/s   hit%  disk hit%   eio/s  level";

// One line of rates between two snapshots of stats taken `seconds` apart.
std::string rates_line(const nlohmann::json& a, const nlohmann::json& b, const nlohmann::json& c, double seconds) {
  const auto per_s = [&](uint64_t x, uint64_t y) { return y >= x ? static_cast<double>(y - x) / seconds : 0.0; };
  const auto delta = [](uint64_t x, uint64_t y) { return y >= x ? y - x : 0; };
  const uint64_t hits = delta(count(a, "cache_hits"), count(b, "cache_hits"));
  const uint64_t all = hits + delta(count(a, "cache_misses"), count(b, "cache_misses"));
  std::string disk = "-";
  if (b.contains("disk_cache") && b["disk_cache"].is_object()) {
    const uint64_t dh = delta(count(a, "disk_cache", "hits"), count(b, "disk_cache", "hits"));
    disk = percent(dh, dh + delta(count(a, "disk_cache", "misses"), count(b, "disk_cache", "misses")));
  }
  const std::time_t now = std::time(nullptr);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
  return fmt::format("{:>8} {:>10.1f} {:>9.2f} {:>11.2f} {:>12.1f} {:>6} {:>10} {:>7.1f} {:>6}", clock,
                     per_s(tree_reads(a), tree_reads(b)), per_s(count(a, "bytes_served"), count(b, "bytes_served")) / 1e6,
                     per_s(count(a, "storage_bytes"), count(b, "storage_bytes")) / 1e6,
                     per_s(count(a, "storage_reads"), count(b, "storage_reads")), percent(hits, all), disk,
                     per_s(count(a, "eio_errors"), count(b, "eio_errors")), c.value("effective_default_level", 0));
}

// The mount that holds `path`: the path itself, or the nearest folder above it whose
// .fidelity/stats exists (the control folder answers at a mount's root only).
Result<std::string> mount_of(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::canonical(path, ec);
  if (ec == std::errc::no_such_file_or_directory) return Error{ENOENT, fmt::format("{}: no such file or folder", path)};
  if (ec) return Error{ec.value(), fmt::format("{}: {}", path, ec.message())};
  if (!std::filesystem::is_directory(p, ec)) p = p.parent_path();
  for (;; p = p.parent_path()) {
    if (std::filesystem::exists(p / ".fidelity" / "stats", ec)) return p.string();
    if (p == p.root_path()) return Error{EINVAL, fmt::format("{}: not in a fidelityfs mount", path)};
  }
}

int print_totals(const std::string& mount) {
  Result<Snapshot> now = read_snapshot(mount);
  if (!now) {
    err(now.error().message);
    return kExitUsage;
  }
  print_summary(mount, now->stats, now->config);
  return kExitOk;
}

int watch_rates(const std::string& mount, double watch, unsigned lines) {
  Result<Snapshot> first = read_snapshot(mount);
  if (!first) {
    err(first.error().message);
    return kExitUsage;
  }
  nlohmann::json s = std::move(first->stats);
  auto before = std::chrono::steady_clock::now();
  for (unsigned n = 0; lines == 0 || n < lines; ++n) {
    if (n % 20 == 0) {
      fmt::print("{}\n", kHeader);
      std::fflush(stdout);  // a pipe too gets each line when it is made
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    Result<Snapshot> next = read_snapshot(mount);
    if (!next) {  // unmounted while watched
      err(next.error().message);
      return kExitRuntime;
    }
    const auto now = std::chrono::steady_clock::now();
    fmt::print("{}\n", rates_line(s, next->stats, next->config, std::chrono::duration<double>(now - before).count()));
    std::fflush(stdout);
    s = std::move(next->stats);
    before = now;
  }
  return kExitOk;
}

int run_stats(const std::string& path, double watch, unsigned lines) {
  Result<std::string> mount = mount_of(path);
  if (!mount) {
    err(mount.error().message);
    return kExitUsage;
  }
  return watch > 0 ? watch_rates(*mount, watch, lines) : print_totals(*mount);
}

}  // namespace

void register_stats(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("stats", "Summarise a mount's reads, cache and storage, or watch its rates");
  auto mount = std::make_shared<std::string>();
  auto watch = std::make_shared<double>(0);
  auto lines = std::make_shared<unsigned>(0);
  cmd->add_option("MOUNT", *mount, "a fidelityfs mount, or any path in one")->required();
  auto* watch_opt = cmd->add_option("--watch", *watch, "print a line of rates every SECONDS (Ctrl-C ends)")
                        ->check(above_zero("seconds"));
  cmd->add_option("--count", *lines, "with --watch: stop after N lines")->check(above_zero("lines"))->needs(watch_opt);
  cmd->callback([mount, watch, lines, &exit_code] { exit_code = run_stats(*mount, *watch, *lines); });
}

}  // namespace fid::cli
