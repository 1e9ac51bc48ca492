// fidelityfs quality: how close each fidelity level of a store's JPEGs is to full, on a seeded
// sample, and the lowest level that meets an MS-SSIM target (overall and per class).
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/progress.h"
#include "common/ascii.h"
#include "cli/quality_measure.h"
#include "cli/store_options.h"
#include "codec/quality_sample.h"
#include "common/error.h"
#include "common/fd.h"
#include "config/config.h"
#include "index/store.h"
#include "storage/open_store.h"

extern char** environ;

namespace fid::cli {

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// "msssim=X" with 0 < X <= 1.
// "msssim=X" (the mean MS-SSIM reaches X) or "msssim_p5=X" (19 of 20 sampled files do), 0 < X <= 1.
std::optional<codec::QualityTarget> parse_target(const std::string& s) {
  const size_t eq = s.find('=');
  codec::QualityTarget t;
  const std::string name = ascii_lower(s.substr(0, eq));
  if (eq == std::string::npos || (name != "msssim" && name != "msssim_p5")) return std::nullopt;
  t.statistic = name == "msssim" ? codec::QualityTarget::Statistic::mean : codec::QualityTarget::Statistic::p5;
  const std::string value = s.substr(eq + 1);
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), t.msssim);
  if (ec != std::errc{} || end != value.data() + value.size() || !(t.msssim > 0 && t.msssim <= 1)) return std::nullopt;
  return t;
}

std::string target_text(const codec::QualityTarget& t) {
  return fmt::format("{} MS-SSIM >= {}", t.statistic == codec::QualityTarget::Statistic::mean ? "mean" : "5th-percentile",
                     t.msssim);
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json summary_json(const codec::Summary& s) {
  nlohmann::json levels = nlohmann::json::array();
  for (const codec::LevelSummary& l : s.levels)
    levels.push_back({{"level", l.level},
                      {"bytes_fraction", l.bytes_fraction},
                      {"psnr", finite_or_null(l.psnr)},
                      {"identical", l.identical},
                      {"ssim", l.ssim},
                      {"msssim", {{"mean", l.msssim_mean}, {"p5", l.msssim_p5}}}});
  return {{"sample", s.sample}, {"levels", levels}, {"recommended", s.recommended}};
}

std::string psnr_text(double psnr) { return std::isfinite(psnr) ? fmt::format("{:.2f}", psnr) : "inf"; }

void print_table(const codec::Summary& s) {
  fmt::print("level  bytes/full  PSNR dB    SSIM  MS-SSIM mean  MS-SSIM p5\n");
  for (const codec::LevelSummary& l : s.levels)
    fmt::print("{:5}  {:10.3f}  {:>7}  {:6.4f}  {:12.4f}  {:10.4f}\n", l.level, l.bytes_fraction, psnr_text(l.psnr),
               l.ssim, l.msssim_mean, l.msssim_p5);
}

// The rules: block that gives each class its recommended level.
std::string class_rules_yaml(const std::map<std::string, codec::Summary>& by_class, int levels) {
  std::vector<config::Rule> rules;
  for (const auto& [cls, s] : by_class) rules.push_back(class_rule(cls, s.recommended == levels ? config::kFull : s.recommended));
  return config::rules_yaml(rules);
}

// Where plot_quality.py is: $FIDELITYFS_SCRIPTS; else beside an installed binary, in
// BIN/../share/fidelityfs (where the package and `cmake --install` put it); else the source tree's
// scripts/ (a build that is run where it was built).
std::string scripts_dir() {
  if (const char* env = std::getenv("FIDELITYFS_SCRIPTS"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path bin = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  const std::filesystem::path installed = bin.parent_path() / "share" / "fidelityfs";
  if (!ec && std::filesystem::exists(installed / "plot_quality.py", ec)) return installed.string();
  return std::string(FIDELITYFS_SOURCE_DIR) + "/scripts";
}

// Whether the plot can be drawn: ENOENT naming what is missing.
Status plot_ready(const std::string& script) {
  if (::access(kPython, X_OK) != 0)
    return Error{ENOENT, fmt::format("{} not found (install python3 and python3-matplotlib)", kPython)};
  if (::access(script.c_str(), R_OK) != 0)
    return Error{ENOENT, fmt::format("{} not found (set FIDELITYFS_SCRIPTS to the folder holding plot_quality.py)", script)};
  return {};
}

// Runs scripts/plot_quality.py on the JSON results; its own errors go to stderr.
Status draw_plot(const std::string& script, const nlohmann::json& results, const std::string& out_png) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string json_path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/fidelityfs-quality-XXXXXX";
  const Fd created(::mkstemp(json_path.data()));  // names the file; the stream below writes it
  if (created.get() < 0)
    return Error{errno, fmt::format("cannot create a temporary file in {}: {}", tmpdir ? tmpdir : "/tmp", std::strerror(errno))};
  {
    std::ofstream out(json_path);
    out << results.dump(2) << "\n";
    if (!out) {
      ::unlink(json_path.c_str());
      return Error{EIO, "cannot write " + json_path};
    }
  }
  std::vector<std::string> args{kPython, script, json_path, out_png};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, kPython, nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (rc == 0) ::waitpid(pid, &status, 0);
  ::unlink(json_path.c_str());
  if (rc != 0) return Error{rc, fmt::format("cannot run {}: {}", kPython, std::strerror(rc))};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Error{EIO, fmt::format("{} failed (see above)", script)};
  return {};
}

struct QualityArgs {
  std::string location;
  std::vector<std::string> options;
  size_t sample = 500;
  uint64_t seed = 0;
  bool by_class = false;
  std::string target = "msssim=0.95";
  bool json = false;
  std::string plot;
  unsigned jobs = 0;
  std::string progress = "auto";
  bool per_file = false;
};

// What a run found, as printed.
struct Report {
  std::string store;  // its location
  int levels = 0;
  codec::QualityTarget target;
  size_t jpeg_files = 0;
  size_t failed = 0;
  std::vector<const MeasuredFile*> measured;  // by path
  codec::Summary overall;
  std::map<std::string, codec::Summary> by_class;  // --by-class
};

codec::Summary summarize_files(const std::vector<const MeasuredFile*>& files, int levels, const codec::QualityTarget& target) {
  std::vector<const codec::LevelScores*> scores;
  for (const MeasuredFile* f : files) scores.push_back(&f->levels);
  return codec::summarize(scores, levels, target);
}

std::map<std::string, codec::Summary> summarize_classes(const std::vector<const MeasuredFile*>& files, int levels,
                                                        const codec::QualityTarget& target) {
  std::map<std::string, std::vector<const MeasuredFile*>> members;
  for (const MeasuredFile* f : files) members[class_of(f->path)].push_back(f);
  std::map<std::string, codec::Summary> by_class;
  for (const auto& [cls, of_class] : members) by_class[cls] = summarize_files(of_class, levels, target);
  return by_class;
}

nlohmann::json per_file_json(const std::vector<const MeasuredFile*>& files) {
  nlohmann::json per_file = nlohmann::json::object();
  for (const MeasuredFile* r : files) {
    nlohmann::json psnr = nlohmann::json::array(), ssim = nlohmann::json::array(), msssim = nlohmann::json::array();
    for (const codec::QualityScores& s : r->levels.scores) {
      psnr.push_back(finite_or_null(s.psnr));
      ssim.push_back(s.ssim);
      msssim.push_back(s.msssim);
    }
    per_file[r->path] = {{"bytes", r->levels.bytes}, {"psnr", psnr}, {"ssim", ssim}, {"msssim", msssim}};
  }
  return per_file;
}

nlohmann::json report_json(const QualityArgs& a, const Report& r) {
  nlohmann::json j = summary_json(r.overall);
  j["store"] = r.store;
  j["seed"] = a.seed;
  j["target"] = {{"msssim", r.target.msssim},
                 {"statistic", r.target.statistic == codec::QualityTarget::Statistic::mean ? "mean" : "p5"}};
  j["jpeg_files"] = r.jpeg_files;
  j["failed"] = r.failed;
  nlohmann::json paths = nlohmann::json::array();
  for (const MeasuredFile* f : r.measured) paths.push_back(f->path);
  j["files"] = paths;
  if (a.per_file) j["per_file"] = per_file_json(r.measured);
  if (a.by_class) {
    nlohmann::json classes = nlohmann::json::object();
    for (const auto& [cls, s] : r.by_class) classes[cls] = summary_json(s);
    j["by_class"] = classes;
    j["rules_yaml"] = class_rules_yaml(r.by_class, r.levels);
  }
  return j;
}

void print_classes(const Report& r) {
  fmt::print("\nby class (top-level folder):\n");
  fmt::print("{:<24}  {:>6}  {:>11}  {:>10}  {:>12}  {:>10}\n", "class", "sample", "recommended", "bytes/full",
             "MS-SSIM mean", "MS-SSIM p5");
  for (const auto& [cls, s] : r.by_class) {
    const codec::LevelSummary& l = s.levels[static_cast<size_t>(s.recommended - 1)];
    fmt::print("{:<24}  {:6}  {:11}  {:10.3f}  {:12.4f}  {:10.4f}\n", cls.empty() ? "(root)" : cls, s.sample,
               s.recommended, l.bytes_fraction, l.msssim_mean, l.msssim_p5);
  }
  fmt::print("\n# for the mount's config file (docs/MOUNT.md, \"Levels\")\n{}", class_rules_yaml(r.by_class, r.levels));
}

void print_report(const QualityArgs& a, const Report& r) {
  fmt::print("store    {}\n", r.store);
  fmt::print("sample   {} of {} JPEG files (seed {}){}\n", r.measured.size(), r.jpeg_files, a.seed,
             r.failed ? fmt::format(", {} failed", r.failed) : "");
  fmt::print("metrics  on luma (BT.601), against the full level; MS-SSIM p5 = 5th percentile\n");
  fmt::print("bytes    bytes/full = the sampled files' bytes at the level over theirs at full (inspect: all JPEGs)\n\n");
  print_table(r.overall);
  const codec::LevelSummary& at = r.overall.levels[static_cast<size_t>(r.overall.recommended - 1)];
  fmt::print("\nrecommended level: {} (the lowest level whose {}; there, mean {:.4f}, 5th percentile {:.4f})\n",
             r.overall.recommended, target_text(r.target), at.msssim_mean, at.msssim_p5);
  if (r.target.statistic == codec::QualityTarget::Statistic::mean && at.msssim_p5 < r.target.msssim) {
    codec::QualityTarget p5 = r.target;
    p5.statistic = codec::QualityTarget::Statistic::p5;
    fmt::print("caution: at level {}, 1 in 20 sampled files scores below {:.4f}; --target msssim_p5={} recommends on "
               "those files instead (level {})\n",
               r.overall.recommended, at.msssim_p5, r.target.msssim, codec::lowest_level_meeting(r.overall.levels, p5));
  }
  if (a.by_class) print_classes(r);
}

int run_quality(const QualityArgs& a) {
  Report r;
  r.target = parse_target(a.target).value_or(codec::QualityTarget{});  // validated by the option's check
  int exit_code = kExitOk;
  std::optional<storage::OpenedStore> opened = open_command_store("quality", a.location, a.options, exit_code);
  if (!opened) return exit_code;
  const std::string script = scripts_dir() + "/plot_quality.py";
  if (Status ready = a.plot.empty() ? Status{} : plot_ready(script); !ready) {
    fmt::print(stderr, "fidelityfs quality: --plot: {}\n", ready.error().message);
    return kExitRuntime;
  }
  const index::Store& store = *opened->store;
  storage::RecordSource& source = *opened->source;
  r.store = store.location();
  r.levels = store.levels();
  const std::vector<uint32_t> jpegs = jpeg_ids(store);
  r.jpeg_files = jpegs.size();
  if (jpegs.empty()) {
    fmt::print(stderr, "fidelityfs quality: {} holds no JPEG files\n", r.store);
    return kExitRuntime;
  }
  ProgressLine line(parse_progress_mode(a.progress), "quality");
  const std::vector<MeasuredFile> results =
      measure_files(store, source, storage_ordered_sample(store, jpegs, a.sample, a.seed), a.jobs, line);
  for (const MeasuredFile& f : results) {
    if (f.error.empty()) {
      r.measured.push_back(&f);
      continue;
    }
    fmt::print(stderr, "BAD {}: {}\n", f.path, f.error);
    r.failed++;
  }
  for (const std::string& p : source.problems()) fmt::print(stderr, "damaged record: {}\n", p);
  if (r.measured.empty()) {
    fmt::print(stderr, "fidelityfs quality: no sampled file could be measured\n");
    return kExitRuntime;
  }
  r.overall = summarize_files(r.measured, r.levels, r.target);
  if (a.by_class) r.by_class = summarize_classes(r.measured, r.levels, r.target);
  const nlohmann::json j = report_json(a, r);
  if (a.json) fmt::print("{}\n", j.dump(2));
  else print_report(a, r);
  if (!a.plot.empty()) {
    if (Status drawn = draw_plot(script, j, a.plot); !drawn) {
      fmt::print(stderr, "fidelityfs quality: --plot: {}\n", drawn.error().message);
      return kExitRuntime;
    }
    if (!a.json) fmt::print("\nplot: {}\n", a.plot);
  }
  return r.failed == 0 && source.problems().empty() ? kExitOk : kExitRuntime;
}

}  // namespace

void register_quality(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quality", "Measure PSNR, SSIM and MS-SSIM of every level against full on a sample");
  auto a = std::make_shared<QualityArgs>();
  cmd->add_option("STORE", a->location, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("--sample", a->sample, "JPEG files to measure, drawn at random (default 500; all if fewer)")
      ->check(above_zero("files"));
  add_u64_option(cmd, "--seed", a->seed, "seed of the sample (default 0)");
  cmd->add_flag("--by-class", a->by_class, "also per class (top-level folder), with a rules: block for the config");
  cmd->add_option("--target", a->target,
                  "msssim=X: the lowest level whose mean MS-SSIM reaches X; msssim_p5=X: whose 5th percentile does "
                  "(19 of 20 files); 0 < X <= 1 (default msssim=0.95)")
      ->check([](const std::string& s) {
        return parse_target(s) ? std::string() : "expected msssim=X or msssim_p5=X with 0 < X <= 1";
      });
  auto* json = cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->add_flag("--per-file", a->per_file, "with --json: every sampled file's scores at every level")->needs(json);
  cmd->add_option("--plot", a->plot, "PNG of bytes vs MS-SSIM per level (needs python3-matplotlib)");
  cmd->add_option("-o", a->options, "remote store options: endpoint=URL, region=, profile=, addressing=, ca_file=");
  cmd->add_option("--jobs", a->jobs, "worker threads (default: all cores)");
  cmd->add_option("--progress", a->progress, "progress line: auto, on, off")->transform(one_of({"auto", "on", "off"}));
  cmd->callback([a, &exit_code] { exit_code = run_quality(*a); });
}

}  // namespace fid::cli
