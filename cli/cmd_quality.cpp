// fidelityfs quality: how close each fidelity level of a store's JPEGs is to full, on a seeded
// sample, and the lowest level that meets an MS-SSIM target (overall and per class).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/store_options.h"
#include "codec/jpeg.h"
#include "codec/quality.h"
#include "core/read_range.h"
#include "index/store.h"
#include "storage/open_store.h"

extern char** environ;

namespace fid::cli {

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// "msssim=X" with 0 < X <= 1.
std::optional<double> parse_target(const std::string& s) {
  constexpr std::string_view prefix = "msssim=";
  if (s.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string value = s.substr(prefix.size());
  double x = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
  if (ec != std::errc{} || end != value.data() + value.size() || !(x > 0 && x <= 1)) return std::nullopt;
  return x;
}

// A uniform draw in [0, n) from the 64-bit Mersenne Twister, whose output the standard fixes; the
// standard distributions are not, and the sample must not change with the C++ library.
uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x;
  do x = rng(); while (x >= limit);
  return x % n;
}

// The first `count` of a seeded Fisher-Yates shuffle: every subset of that size equally likely.
std::vector<uint32_t> seeded_sample(std::vector<uint32_t> ids, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  count = std::min(count, ids.size());
  for (size_t i = 0; i < count; ++i) std::swap(ids[i], ids[i + draw_below(rng, ids.size() - i)]);
  ids.resize(count);
  return ids;
}

// ImageFolder's class: the top-level folder of the path; "" for files at the root.
std::string class_of(const std::string& relative_path) {
  size_t slash = relative_path.find('/');
  return slash == std::string::npos ? std::string() : relative_path.substr(0, slash);
}

// One sampled file: its size and scores at every level 1..L (level L is the reference itself).
struct FileResult {
  std::string path;
  std::vector<uint64_t> bytes;
  std::vector<codec::QualityScores> scores;
  std::string error;  // empty when measured
};

// Reads every piece of f once, then decodes each level from them and scores it against full.
std::string measure_file(const index::Store& store, storage::RecordSource& source, const index::File& f,
                         std::vector<uint8_t>& pieces_buf, FileResult& out) {
  const int levels = store.levels();
  const uint64_t all = store.size_at_level(f, levels) - index::level_trailer(f.kind).size();
  core::StoredPieces stored(store, source);
  if (Status st = core::read_range(store, f, levels, 0, all, stored, pieces_buf); !st.ok()) return st.error().message;
  core::MemoryPieces pieces(store, pieces_buf);
  std::vector<uint8_t> file;
  auto decode_level = [&](int k, codec::LumaPlane& luma) -> std::string {
    if (Status st = core::read_range(store, f, k, 0, store.size_at_level(f, k), pieces, file); !st.ok())
      return fmt::format("level {}: {}", k, st.error().message);
    fid::Result<codec::DecodedImage> decoded = codec::decode_jpeg_strict(file);
    if (!decoded) return fmt::format("level {} does not decode: {}", k, decoded.error().message);
    luma = codec::luma_of(*decoded);
    return {};
  };
  codec::LumaPlane full, level;
  if (std::string why = decode_level(levels, full); !why.empty()) return why;
  out.bytes.resize(static_cast<size_t>(levels));
  out.scores.resize(static_cast<size_t>(levels));
  for (int k = 1; k <= levels; ++k) {
    out.bytes[static_cast<size_t>(k - 1)] = store.size_at_level(f, k);
    if (k < levels) {
      if (std::string why = decode_level(k, level); !why.empty()) return why;
    }
    fid::Result<codec::QualityScores> s = codec::compare_luma(full, k < levels ? level : full);
    if (!s) return fmt::format("level {}: {}", k, s.error().message);
    out.scores[static_cast<size_t>(k - 1)] = *s;
  }
  return {};
}

struct LevelSummary {
  int level = 0;
  double bytes_fraction = 0;
  // PSNR of the sample's mean luma MSE: an image equal to full adds an error of 0 (a mean of
  // per-image PSNRs would be infinite as soon as one is). +inf when all are equal.
  double psnr = 0;
  size_t identical = 0;  // images whose level decodes to exactly the full pixels
  double ssim = 0;
  double msssim_mean = 0;
  double msssim_p5 = 0;
};

struct Summary {
  size_t sample = 0;
  std::vector<LevelSummary> levels;
  int recommended = 0;  // lowest level whose mean MS-SSIM meets the target
};

Summary summarize(const std::vector<const FileResult*>& files, int levels, double target) {
  Summary sum;
  sum.sample = files.size();
  uint64_t full_bytes = 0;
  for (const FileResult* f : files) full_bytes += f->bytes.back();
  for (int k = 1; k <= levels; ++k) {
    const auto i = static_cast<size_t>(k - 1);
    LevelSummary l;
    l.level = k;
    uint64_t bytes = 0;
    double mse_sum = 0, ssim_sum = 0, msssim_sum = 0;
    std::vector<double> msssim;
    for (const FileResult* f : files) {
      const codec::QualityScores& s = f->scores[i];
      bytes += f->bytes[i];
      if (std::isinf(s.psnr)) l.identical++;
      mse_sum += s.mse;
      ssim_sum += s.ssim;
      msssim_sum += s.msssim;
      msssim.push_back(s.msssim);
    }
    const auto n = static_cast<double>(files.size());
    l.bytes_fraction = full_bytes ? static_cast<double>(bytes) / static_cast<double>(full_bytes) : 0;
    l.psnr = mse_sum > 0 ? 10 * std::log10(255.0 * 255.0 / (mse_sum / n)) : std::numeric_limits<double>::infinity();
    l.ssim = ssim_sum / n;
    l.msssim_mean = msssim_sum / n;
    l.msssim_p5 = codec::percentile(std::move(msssim), 5);
    if (sum.recommended == 0 && l.msssim_mean >= target) sum.recommended = k;
    sum.levels.push_back(l);
  }
  if (sum.recommended == 0) sum.recommended = levels;  // level L equals full: MS-SSIM 1
  return sum;
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json summary_json(const Summary& s) {
  nlohmann::json levels = nlohmann::json::array();
  for (const LevelSummary& l : s.levels)
    levels.push_back({{"level", l.level},
                      {"bytes_fraction", l.bytes_fraction},
                      {"psnr", finite_or_null(l.psnr)},
                      {"identical", l.identical},
                      {"ssim", l.ssim},
                      {"msssim", {{"mean", l.msssim_mean}, {"p5", l.msssim_p5}}}});
  return {{"sample", s.sample}, {"levels", levels}, {"recommended", s.recommended}};
}

std::string psnr_text(double psnr) { return std::isfinite(psnr) ? fmt::format("{:.2f}", psnr) : "inf"; }

void print_table(const Summary& s) {
  fmt::print("level  bytes/full  PSNR dB    SSIM  MS-SSIM mean  MS-SSIM p5\n");
  for (const LevelSummary& l : s.levels)
    fmt::print("{:5}  {:10.3f}  {:>7}  {:6.4f}  {:12.4f}  {:10.4f}\n", l.level, l.bytes_fraction, psnr_text(l.psnr),
               l.ssim, l.msssim_mean, l.msssim_p5);
}

// A class name as a rule glob matching its whole subtree (glob metacharacters escaped), quoted
// for YAML. Files at the root get "*" (one path segment: the root's files only).
std::string class_rule_path(const std::string& cls) {
  if (cls.empty()) return "\"*\"";
  std::string glob;
  for (char c : cls) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') glob += '\\';
    glob += c;
  }
  glob += "/**";
  std::string quoted = "\"";
  for (char c : glob) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string rules_yaml(const std::map<std::string, Summary>& by_class, int levels) {
  std::string y = "rules:\n";
  for (const auto& [cls, s] : by_class) {
    std::string level = s.recommended == levels ? "full" : std::to_string(s.recommended);
    y += fmt::format("  - {{path: {}, scan_group: {}}}\n", class_rule_path(cls), level);
  }
  return y;
}

std::string scripts_dir() {
  if (const char* env = std::getenv("FIDELITYFS_SCRIPTS"); env && *env) return env;
  return std::string(FIDELITYFS_SOURCE_DIR) + "/scripts";
}

// Empty when the plot can be drawn, else what is missing.
std::string plot_missing(const std::string& script) {
  if (::access(kPython, X_OK) != 0) return fmt::format("{} not found (install python3 and python3-matplotlib)", kPython);
  if (::access(script.c_str(), R_OK) != 0)
    return fmt::format("{} not found (set FIDELITYFS_SCRIPTS to the folder holding plot_quality.py)", script);
  return {};
}

// Runs scripts/plot_quality.py on the JSON results; its own errors go to stderr.
std::string draw_plot(const std::string& script, const nlohmann::json& results, const std::string& out_png) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string json_path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/fidelityfs-quality-XXXXXX";
  int fd = ::mkstemp(json_path.data());
  if (fd < 0) return fmt::format("cannot create a temporary file in {}: {}", tmpdir ? tmpdir : "/tmp", std::strerror(errno));
  ::close(fd);
  {
    std::ofstream out(json_path);
    out << results.dump(2) << "\n";
    if (!out) {
      ::unlink(json_path.c_str());
      return "cannot write " + json_path;
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
  if (rc != 0) return fmt::format("cannot run {}: {}", kPython, std::strerror(rc));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fmt::format("{} failed (see above)", script);
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

int run_quality(const QualityArgs& a) {
  const double target = parse_target(a.target).value_or(0.95);  // validated by the option's check
  config::Settings settings;
  try {
    settings = parse_store_location_options(a.options);
  } catch (const config::ConfigError& e) {
    fmt::print(stderr, "fidelityfs quality: {}\n", e.what());
    return kExitUsage;
  }
  const std::string script = scripts_dir() + "/plot_quality.py";
  if (!a.plot.empty()) {
    if (std::string missing = plot_missing(script); !missing.empty()) {
      fmt::print(stderr, "fidelityfs quality: --plot: {}\n", missing);
      return kExitRuntime;
    }
  }
  auto opened = storage::open_store(a.location, store_options(settings));
  if (!opened.ok()) {
    fmt::print(stderr, "fidelityfs quality: {}\n", opened.error().message);
    return kExitRuntime;
  }
  std::unique_ptr<index::Store> store = std::move(opened->store);
  storage::RecordSource& source = *opened->source;
  const int levels = store->levels();
  auto files = store->files();

  std::vector<uint32_t> jpegs;
  for (const index::File& f : files)
    if (f.kind == index::FileKind::jpeg) jpegs.push_back(f.id);
  if (jpegs.empty()) {
    fmt::print(stderr, "fidelityfs quality: {} holds no JPEG files\n", store->location());
    return kExitRuntime;
  }
  std::vector<uint32_t> sample = seeded_sample(jpegs, a.sample, a.seed);
  // Storage order: neighbours share record reads.
  std::sort(sample.begin(), sample.end(), [&](uint32_t x, uint32_t y) {
    return store->storage_position(files[x]) < store->storage_position(files[y]);
  });

  std::vector<FileResult> results(sample.size());
  std::atomic<size_t> next{0}, done{0};
  std::atomic<uint64_t> bytes{0};
  unsigned jobs = a.jobs ? a.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < jobs; ++t) {
    workers.emplace_back([&] {
      std::vector<uint8_t> buf;
      for (size_t i; (i = next++) < sample.size();) {
        const index::File& f = files[sample[i]];
        results[i].path = store->relative_path(f);
        results[i].error = measure_file(*store, source, f, buf, results[i]);
        bytes += buf.size();
        done++;
      }
    });
  }
  ProgressLine line(parse_progress_mode(a.progress), "quality");
  auto t0 = std::chrono::steady_clock::now();
  while (done < sample.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // progress refresh period
    line.update(done, sample.size(), bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& w : workers) w.join();
  line.finish();

  std::sort(results.begin(), results.end(), [](const FileResult& x, const FileResult& y) { return x.path < y.path; });
  std::vector<const FileResult*> measured;
  std::map<std::string, std::vector<const FileResult*>> measured_by_class;
  size_t failed = 0;
  for (const FileResult& r : results) {
    if (!r.error.empty()) {
      fmt::print(stderr, "BAD {}: {}\n", r.path, r.error);
      failed++;
      continue;
    }
    measured.push_back(&r);
    measured_by_class[class_of(r.path)].push_back(&r);
  }
  for (const std::string& p : source.problems()) fmt::print(stderr, "damaged record: {}\n", p);
  if (measured.empty()) {
    fmt::print(stderr, "fidelityfs quality: no sampled file could be measured\n");
    return kExitRuntime;
  }
  const Summary overall = summarize(measured, levels, target);
  std::map<std::string, Summary> by_class;
  if (a.by_class)
    for (const auto& [cls, members] : measured_by_class) by_class[cls] = summarize(members, levels, target);

  nlohmann::json j = summary_json(overall);
  j["store"] = store->location();
  j["seed"] = a.seed;
  j["target"] = {{"msssim", target}};
  j["jpeg_files"] = jpegs.size();
  j["failed"] = failed;
  nlohmann::json paths = nlohmann::json::array();
  for (const FileResult* r : measured) paths.push_back(r->path);
  j["files"] = paths;
  if (a.per_file) {
    nlohmann::json per_file = nlohmann::json::object();
    for (const FileResult* r : measured) {
      nlohmann::json psnr = nlohmann::json::array(), ssim = nlohmann::json::array(), msssim = nlohmann::json::array();
      for (const codec::QualityScores& s : r->scores) {
        psnr.push_back(finite_or_null(s.psnr));
        ssim.push_back(s.ssim);
        msssim.push_back(s.msssim);
      }
      per_file[r->path] = {{"bytes", r->bytes}, {"psnr", psnr}, {"ssim", ssim}, {"msssim", msssim}};
    }
    j["per_file"] = per_file;
  }
  if (a.by_class) {
    nlohmann::json classes = nlohmann::json::object();
    for (const auto& [cls, s] : by_class) classes[cls] = summary_json(s);
    j["by_class"] = classes;
    j["rules_yaml"] = rules_yaml(by_class, levels);
  }

  if (a.json) {
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("store    {}\n", store->location());
    fmt::print("sample   {} of {} JPEG files (seed {}){}\n", measured.size(), jpegs.size(), a.seed,
               failed ? fmt::format(", {} failed", failed) : "");
    fmt::print("metrics  on luma (BT.601), against the full level; MS-SSIM p5 = 5th percentile\n\n");
    print_table(overall);
    fmt::print("\nrecommended level: {} (lowest level whose mean MS-SSIM >= {})\n", overall.recommended, target);
    if (a.by_class) {
      fmt::print("\nby class (top-level folder):\n");
      fmt::print("{:<24}  {:>6}  {:>11}  {:>10}  {:>12}  {:>10}\n", "class", "sample", "recommended", "bytes/full",
                 "MS-SSIM mean", "MS-SSIM p5");
      for (const auto& [cls, s] : by_class) {
        const LevelSummary& l = s.levels[static_cast<size_t>(s.recommended - 1)];
        fmt::print("{:<24}  {:6}  {:11}  {:10.3f}  {:12.4f}  {:10.4f}\n", cls.empty() ? "(root)" : cls, s.sample,
                   s.recommended, l.bytes_fraction, l.msssim_mean, l.msssim_p5);
      }
      fmt::print("\n# for the mount's config file (docs/MOUNT.md, \"Levels\")\n{}", rules_yaml(by_class, levels));
    }
  }
  if (!a.plot.empty()) {
    if (std::string why = draw_plot(script, j, a.plot); !why.empty()) {
      fmt::print(stderr, "fidelityfs quality: --plot: {}\n", why);
      return kExitRuntime;
    }
    if (!a.json) fmt::print("\nplot: {}\n", a.plot);
  }
  return failed == 0 && source.problems().empty() ? kExitOk : kExitRuntime;
}

}  // namespace

void register_quality(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quality", "Measure PSNR, SSIM and MS-SSIM of every level against full on a sample");
  auto a = std::make_shared<QualityArgs>();
  cmd->add_option("STORE", a->location, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("--sample", a->sample, "JPEG files to measure, drawn at random (default 500; all if fewer)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "seed of the sample (default 0)");
  cmd->add_flag("--by-class", a->by_class, "also per class (top-level folder), with a rules: block for the config");
  cmd->add_option("--target", a->target, "msssim=X, 0 < X <= 1 (default msssim=0.95)")
      ->check([](const std::string& s) { return parse_target(s) ? std::string() : "expected msssim=X with 0 < X <= 1"; });
  cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->add_flag("--per-file", a->per_file, "with --json: every sampled file's scores at every level");
  cmd->add_option("--plot", a->plot, "PNG of bytes vs MS-SSIM per level (needs python3-matplotlib)");
  cmd->add_option("-o", a->options, "remote store options: endpoint=URL, region=, profile=, addressing=, ca_file=");
  cmd->add_option("--jobs", a->jobs, "worker threads (default: all cores)");
  cmd->add_option("--progress", a->progress, "progress line: auto, on, off")->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->callback([a, &exit_code] { exit_code = run_quality(*a); });
}

}  // namespace fid::cli
