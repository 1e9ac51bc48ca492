#include "core/telemetry.h"

#include <unistd.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <variant>

#include "config/settings_table.h"

namespace fid::core {
namespace {

// A reading's value under its stats key ("a", "a.b" or "a[]").
void put(nlohmann::ordered_json& j, const Reading& r) {
  const std::string_view key = r.key;
  if (key.empty()) return;
  if (key.ends_with("[]")) {
    j[std::string(key.substr(0, key.size() - 2))].push_back(r.value);
    return;
  }
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) j[std::string(key)] = r.value;
  else j[std::string(key.substr(0, dot))][std::string(key.substr(dot + 1))] = r.value;
}

}  // namespace

Telemetry::Telemetry(Parts parts)
    : p_(std::move(parts)),
      started_(std::chrono::steady_clock::now()),
      read_counts_(new ReadCount[static_cast<size_t>(p_.store.levels()) + 4]) {}

void Telemetry::count_control_read(uint64_t bytes) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void Telemetry::count_read(index::FileKind kind, int level, uint64_t bytes, std::chrono::nanoseconds took) {
  ReadCount& count = read_counts_[read_slot(kind, level)];
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  count.reads.fetch_add(1, std::memory_order_relaxed);
  count.bytes.fetch_add(bytes, std::memory_order_relaxed);
  read_latency_.observe(took);
}

size_t Telemetry::read_slot(index::FileKind kind, int level) const {
  const size_t levels = static_cast<size_t>(p_.store.levels());
  switch (kind) {
    case index::FileKind::jpeg: return static_cast<size_t>(level);
    case index::FileKind::l3: return levels + 1;
    case index::FileKind::blob: break;
    case index::FileKind::frame: return levels + 3;
  }
  return levels + 2;
}

std::string Telemetry::render(NodeType t) const {
  return t == NodeType::ctl_stats ? stats_json() : t == NodeType::ctl_metrics ? metrics_text() : config_json();
}

Readings Telemetry::readings() const {
  using K = Reading::Kind;
  const auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_);
  Readings r = {
      {"levels", K::gauge, "fidelityfs_levels", "levels of the store's JPEGs", static_cast<uint64_t>(p_.store.levels())},
      {"default_level", K::gauge, "fidelityfs_default_level", "the mount's default JPEG level",
       static_cast<uint64_t>(p_.levels.mount_default())},
      // Whole seconds: an idle mount's stats stay one file.
      {"uptime_s", K::gauge, "fidelityfs_uptime_seconds", "seconds since the mount started", static_cast<uint64_t>(up.count())},
      {"lookups", K::counter, "fidelityfs_lookups_total", "name lookups in the tree", lookups_.load()},
      {"reads", K::counter, "", "", reads_.load()},  // by kind and level in fidelityfs_reads_total
      {"bytes_served", K::counter, "", "", bytes_.load()},
      {"level_changes", K::counter, "fidelityfs_level_changes_total",
       "levels and order seeds set or removed through user.fidelity.* attributes", p_.changes.changes()},
      {"level_changes_refused", K::counter, "fidelityfs_level_changes_refused_total",
       "level changes refused with EPERM (level_changes=)", p_.change_access.refusals()},
      {"invalidations", K::counter, "fidelityfs_invalidations_total",
       "names the kernel was told to forget after level changes", p_.changes.invalidations()},
      // A test waits for 0 before checking the tree at rest.
      {"invalidations_pending", K::gauge, "", "", p_.changes.pending()},
      {"overrides", K::gauge, "fidelityfs_level_overrides", "files and folders with a level override",
       p_.levels.override_count()},
      {"order_opens", K::counter, "", "", p_.orders.opens()},
  };
  p_.source.add_readings(r);
  p_.reader.add_readings(r);
  p_.pushes.add_readings(r);
  p_.listings.add_readings(r);
  add_read_readings(r);
  p_.request_errors.add_readings(r);
  return r;
}

// Reads the kernel sent us (page-cache hits never reach the daemon), by kind and JPEG level.
void Telemetry::add_read_readings(Readings& r) const {
  using K = Reading::Kind;
  constexpr std::string_view reads = "fidelityfs_reads_total", bytes = "fidelityfs_read_bytes_total";
  constexpr std::string_view reads_help = "FUSE reads of tree files served (page-cache hits never reach the daemon)";
  constexpr std::string_view bytes_help = "bytes those reads returned";
  uint64_t jpeg = 0;
  for (int k = 1; k <= p_.store.levels(); ++k) jpeg += read_counts_[read_slot(index::FileKind::jpeg, k)].reads.load();
  r.push_back({"reads_by_kind.jpeg", K::counter, "", "", jpeg});
  for (int k = 1; k <= p_.store.levels(); ++k) {
    const ReadCount& c = read_counts_[read_slot(index::FileKind::jpeg, k)];
    r.push_back({"jpeg_reads_by_level[]", K::counter, reads, reads_help, c.reads.load(), {{"kind", "jpeg"}, {"level", std::to_string(k)}}});
    r.push_back({"", K::counter, bytes, bytes_help, c.bytes.load(), {{"kind", "jpeg"}, {"level", std::to_string(k)}}});
  }
  for (index::FileKind kind : {index::FileKind::l3, index::FileKind::blob, index::FileKind::frame}) {
    const ReadCount& c = read_counts_[read_slot(kind, 1)];
    const std::string name(index::kind_name(kind));
    r.push_back({"reads_by_kind." + name, K::counter, reads, reads_help, c.reads.load(), {{"kind", name}, {"level", "1"}}});
    r.push_back({"", K::counter, bytes, bytes_help, c.bytes.load(), {{"kind", name}, {"level", "1"}}});
  }
}

void Telemetry::set_transport(std::string what) {
  std::lock_guard lock(transport_mu_);
  transport_ = std::move(what);
}

std::string Telemetry::stats_json() const {
  nlohmann::ordered_json j;
  j["store"] = p_.store.location();
  j["pid"] = static_cast<int64_t>(::getpid());  // the daemon's: to signal it, to find its /proc entries
  j["layout"] = index::layout_name(p_.store.layout());
  j["files"] = p_.store.files().size();
  {
    std::lock_guard lock(transport_mu_);
    j["transport"] = transport_;
  }
  j["dirs"] = p_.store.dirs().size();
  for (const Reading& r : readings()) put(j, r);
  if (!j.contains("disk_cache")) j["disk_cache"] = nullptr;
  j["prefetch_following"] = p_.reader.following();
  // What the mount decided and why (random reads, the GPU decoder): text and numbers together.
  const ReadStats& io = p_.reader.stats();
  const RandomReadsDecision d = p_.random_reads.decision();
  j["random_reads"] = {{"setting", config::random_reads_name(d.setting)}, {"mode", d.records ? "records" : "pieces"},
                       {"why", d.text()}, {"needed", d.needed}, {"budget", d.budget}, {"budget_of", d.budget_name},
                       {"share", d.share}, {"loads", io.read_loads.load()}, {"room_waits", io.room_waits.load()},
                       {"local_copy_reads", io.local_copy_reads.load()}};
  if (const auto gpu = p_.reader.gpu_report()) {
    const L3Batcher::Stats& s = gpu->batches;
    const codec::L3DecoderStats& dec = gpu->decoder_stats;
    j["gpu"] = {{"decoder", gpu->decoder}, {"jobs", s.jobs}, {"batches", s.batches}, {"full_batches", s.full_batches},
                {"failed_jobs", s.failed_jobs}, {"cpu_fallbacks", s.cpu_fallbacks}, {"max_batch_bytes", gpu->max_batch_bytes},
                {"pageable_views", dec.pageable_views}, {"buffer_growths", dec.buffer_growths},
                {"host_allocations", dec.host_allocations}, {"device_allocations", dec.device_allocations},
                {"peak_in_flight", dec.peak_in_flight}, {"kernel_seconds", dec.kernel_seconds}};
  } else {
    j["gpu"] = nullptr;
  }
  return j.dump(2) + "\n";
}

// The same readings as stats_json, under their Prometheus names (docs/MOUNT.md "Metrics").
std::string Telemetry::metrics_text() const {
  MetricsText m({{"mountpoint", p_.mountpoint}});
  m.histogram("fidelityfs_read_duration_seconds", "time from a read request to its bytes, tree files", read_latency_.snapshot());
  m.readings(readings());
  return m.text();
}

std::string Telemetry::config_json() const {
  const auto gpu = p_.reader.gpu_report();
  std::string transport;
  {
    std::lock_guard lock(transport_mu_);
    transport = transport_;
  }
  return core::config_json(p_.settings, {.store = p_.store.location(), .mountpoint = p_.mountpoint,
                                         .levels = p_.store.levels(), .effective_default_level = p_.levels.mount_default(),
                                         .gpu_decoder = gpu ? gpu->decoder : std::string("cpu"),
                                         .source = p_.source.describe(), .level_changers = p_.change_access.describe(),
                                         .transport = transport});
}

std::string config_json(const config::Settings& s, const MountFacts& facts) {
  nlohmann::ordered_json j;
  j["store"] = facts.store;
  j["mountpoint"] = facts.mountpoint;
  j["config_file"] = s.config_file;
  j["levels"] = facts.levels;
  for (const config::Setting& row : config::settings_table()) {
    const std::string name(row.name);
    j[name] = std::visit([](const auto& v) { return nlohmann::ordered_json(v); }, row.value(s));
    // The keys that are not rows, where they have always been.
    if (name == "scan_group") {
      j["effective_default_level"] = facts.effective_default_level;
    } else if (name == "encoding") {
      nlohmann::ordered_json rules = nlohmann::ordered_json::array();
      for (const auto& r : s.rules) rules.push_back({{"path", r.glob}, {"scan_group", config::level_text(r.level)}});
      j["rules"] = rules;
    } else if (name == "transport") {
      j["transport_in_use"] = facts.transport;
    } else if (name == "gpu") {
      j["gpu_decoder"] = facts.gpu_decoder;
    } else if (name == "readdir") {
      j["source"] = facts.source;
    } else if (name == "order_ranks") {
      j["allow_other"] = s.allow_other;
    } else if (name == "level_changes") {
      j["level_changers"] = facts.level_changers;
    }
  }
  j["log"] = {{"level", config::log_level_name(s.log_level)}, {"file", s.log_file}};
  return j.dump(2) + "\n";
}

}  // namespace fid::core
