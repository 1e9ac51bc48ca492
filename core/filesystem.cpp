#include "core/filesystem.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "index/order.h"

namespace fid::core {

Filesystem::Filesystem(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
                       const Options& options)
    : store_(store),
      source_(source),
      settings_(settings),
      options_(options),
      inodes_(static_cast<uint32_t>(store.dirs().size()), static_cast<uint32_t>(store.files().size()), store.levels()),
      policy_(make_level_policy(store, settings)),
      encodings_(make_encoding_policy(store, settings)),
      display_names_(make_display_names(store, settings)),
      reader_(store, source, settings, options.gpu),
      orders_(store, settings.order_seed.value_or(store.seed()), settings.order_window, rank_deal(settings.order_ranks),
              &display_names_),
      control_(inodes_, [this](NodeType t) { return control_text(t); }),
      names_(store, inodes_, policy_, encodings_, reader_, control_, orders_, display_names_),
      changes_(store, inodes_, policy_, encodings_, names_, settings.threads),
      xattrs_(store, policy_, encodings_, reader_, orders_, changes_, [this] { forget_order_files(); }),
      change_access_(settings.level_changes, options.owner, options.level_change_group),
      started_(std::chrono::steady_clock::now()),
      read_counts_(new ReadCount[static_cast<size_t>(store.levels()) + 3]) {
  for (const auto& r : store.records()) store_bytes_ += r.size;
  source.cancel_on(&stopping_);
  log_info("records: {}", source.describe());
  decide_random_reads();
}

Filesystem::~Filesystem() = default;

void Filesystem::attach(KernelCache* kernel) { changes_.attach(kernel); }
void Filesystem::detach() {
  stopping_.store(true);  // reads on the wire end now: a shutdown never waits for a server
  changes_.detach();
}

std::string Filesystem::describe() const {
  return fmt::format("mounted {} at {} ({} files, {} dirs, {} levels, {} layout, default level {})",
                     store_.location(), options_.mountpoint, store_.files().size(), store_.dirs().size(),
                     store_.levels(), index::layout_name(store_.layout()), policy_.mount_default());
}

// ---- names and attributes ----------------------------------------------------------------------

Result<Filesystem::Entry> Filesystem::lookup(uint64_t parent, std::string_view name) {
  const Node pn = inodes_.decode(parent);
  // Lookups in the tree only: counting those of /.fidelity itself would change stats at every
  // lookup of stats, and every stat-then-open (cp) would see two different snapshots.
  if (pn.type == NodeType::dir) lookups_.fetch_add(1, std::memory_order_relaxed);
  if (!is_dir_node(pn.type)) return pn.type == NodeType::invalid ? Error{ENOENT, "no such folder"} : Error{ENOTDIR, "not a folder"};
  Entry e;
  e.ino = names_.lookup(pn, name, &e.generation);
  if (e.ino == 0) return e;
  if (!names_.attributes(e.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", name)};
  Node cn = inodes_.decode(e.ino);
  e.name_cacheable = Namespace::name_cacheable(cn.type);
  if (options_.after_level_read_for_tests) options_.after_level_read_for_tests(e.ino);
  names_.note_known(cn);
  // The level again, now that the name is known: a change that set it after the first reading
  // either is seen here or sees the name known and invalidates it (after this reply, as the
  // kernel holds the folder's lock until then). Either way no old-level inode stays cached.
  if (cn.type == NodeType::file && cn.view == 0) {
    const uint64_t now = names_.live_file_ino(cn.id);
    if (now != e.ino) {
      e.ino = now;
      if (!names_.attributes(e.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", name)};
    }
  }
  return e;
}

Result<struct stat> Filesystem::getattr(uint64_t ino) {
  struct stat st;
  if (!names_.attributes(ino, st)) return Error{ENOENT, "no such inode"};
  return st;
}

Status Filesystem::access(uint64_t ino, int mask) {
  if (inodes_.decode(ino).type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  if (mask & W_OK) return Error{EROFS, "read-only file system"};
  return {};
}

Status Filesystem::open(uint64_t ino, int flags) {
  const Node n = inodes_.decode(ino);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) return Error{EROFS, "read-only file system"};
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  if (is_dir_node(n.type)) return Error{EISDIR, "a folder"};
  return {};
}

Status Filesystem::opendir(uint64_t ino, int flags) {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  if (!is_dir_node(n.type)) return Error{ENOTDIR, "not a folder"};
  if ((flags & O_ACCMODE) != O_RDONLY) return Error{EROFS, "read-only file system"};
  return {};
}

Result<std::optional<Namespace::DirEntry>> Filesystem::entry_at(uint64_t dir, size_t i) {
  if (!is_dir_node(inodes_.decode(dir).type)) return Error{ENOTDIR, "not a folder"};
  return names_.entry_at(dir, i);
}

Result<Filesystem::Entry> Filesystem::listed_entry(const Namespace::DirEntry& d) {
  Entry e;
  e.ino = d.ino;
  if (!names_.attributes(d.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", d.name)};
  const Node n = inodes_.decode(d.ino);
  e.name_cacheable = Namespace::name_cacheable(n.type);
  if (d.name == "." || d.name == "..") return e;
  names_.note_known(n);
  if (n.type == NodeType::file && n.view == 0) {  // the level again, as in lookup
    const uint64_t now = names_.live_file_ino(n.id);
    if (now != e.ino && names_.attributes(now, e.attr)) e.ino = now;
  }
  return e;
}

struct statvfs Filesystem::statfs() const {
  struct statvfs st {};
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  st.f_blocks = (store_bytes_ + 4095) / 4096;
  st.f_files = store_.files().size() + store_.dirs().size();
  st.f_namemax = 255;
  st.f_flag = ST_NOSUID | ST_NODEV;
  return st;
}

// ---- reads -------------------------------------------------------------------------------------

Result<FileReader::Bytes> Filesystem::read(uint64_t ino, uint64_t offset, uint64_t size) {
  const Node n = inodes_.decode(ino);
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (is_snapshot(n.type) || n.type == NodeType::order_file) return read_control(n, offset, size);
  if (n.type != NodeType::file || n.id >= store_.files().size())
    return n.type == NodeType::invalid || n.type == NodeType::file ? Error{ENOENT, "no such file"} : Error{EISDIR, "a folder"};
  const auto start = std::chrono::steady_clock::now();
  const index::File& f = store_.files()[n.id];
  ReadCount& count = read_counts_[read_slot(f.kind, n.level)];
  count.reads.fetch_add(1, std::memory_order_relaxed);
  auto r = reader_.read(f, n.level, n.sequential, offset, size);
  if (r.ok()) {
    bytes_.fetch_add(r->data.size(), std::memory_order_relaxed);
    count.bytes.fetch_add(r->data.size(), std::memory_order_relaxed);
  }
  read_latency_.observe(std::chrono::steady_clock::now() - start);
  return r;
}

size_t Filesystem::read_slot(index::FileKind kind, int level) const {
  const size_t levels = static_cast<size_t>(store_.levels());
  switch (kind) {
    case index::FileKind::jpeg: return static_cast<size_t>(level);
    case index::FileKind::l3: return levels + 1;
    case index::FileKind::blob: break;
  }
  return levels + 2;
}

Result<FileReader::Bytes> Filesystem::read_control(const Node& n, uint64_t offset, uint64_t size) {
  ControlFiles::Text text;
  if (n.type == NodeType::order_file) {
    text = orders_.text(n.id);
    if (!text) return Error{ENOENT, "the order file's slot was reused"};
    if (offset == 0) {  // a reader took an order: the prefetcher follows it from now on
      auto held = orders_.held(n.id);
      orders_.note_open();
      if (held) reader_.prefetcher().follow(held->seed, held->name.epoch, held->name.world);
      if (held && held->name.world > 1) note_rank_order(*held);
    }
  } else {
    text = control_.content(n);
  }
  const size_t begin = std::min<uint64_t>(offset, text->size());
  const size_t len = std::min<uint64_t>(size, text->size() - begin);
  bytes_.fetch_add(len, std::memory_order_relaxed);
  return FileReader::Bytes{{reinterpret_cast<const uint8_t*>(text->data()) + begin, len}, text};
}

// ---- attributes --------------------------------------------------------------------------------

Result<std::string> Filesystem::getxattr(uint64_t ino, std::string_view name) {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  return xattrs_.get(n, name);
}

Result<std::string> Filesystem::listxattr(uint64_t ino) {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  return xattrs_.list(n);
}

Status Filesystem::setxattr(uint64_t ino, std::string_view name, std::string_view value, int flags,
                            const Caller& caller) {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  if (Xattrs::is_ours(name))
    if (Status allowed = change_access_.check(caller); !allowed.ok()) return allowed;
  Status st = xattrs_.set(n, name, value, flags);
  if (st.ok() && name == "user.fidelity.scan_group") decide_random_reads();
  return st;
}

Status Filesystem::removexattr(uint64_t ino, std::string_view name, const Caller& caller) {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  if (Xattrs::is_ours(name))
    if (Status allowed = change_access_.check(caller); !allowed.ok()) return allowed;
  Status st = xattrs_.remove(n, name);
  if (st.ok() && name == "user.fidelity.scan_group") decide_random_reads();
  return st;
}

// ---- random reads ------------------------------------------------------------------------------

void Filesystem::decide_random_reads() {
  std::lock_guard lock(share_mu_);
  std::optional<uint64_t> disk_bytes;
  if (source_.keeps_copies()) disk_bytes = source_.local_copy_capacity();
  const uint64_t needed = prefix_bytes_needed(store_, policy_, share_, !source_.keeps_copies());
  RandomReadsDecision d =
      core::decide_random_reads(settings_.random_reads, needed, settings_.cache_bytes, disk_bytes, share_.what);
  const bool changed = d.records != random_reads_.records || d.text() != random_reads_.text();
  reader_.set_random_reads(d.records, d.memory_holds_all);
  if (changed) log_info("random reads: {}", d.text());
  random_reads_ = std::move(d);
}

void Filesystem::note_rank_order(const OrderSlots::Held& held) {
  const OrderName& name = held.name;
  {
    std::lock_guard lock(share_mu_);
    const bool per_epoch = orders_.deal() == index::RankDeal::per_epoch;
    if (name.world != share_world_ || (per_epoch && name.epoch != share_epoch_)) {
      share_world_ = name.world;
      share_ranks_.clear();
    }
    share_epoch_ = name.epoch;
    index::OrderParams p;
    p.seed = held.seed;
    p.epoch = name.epoch;
    p.world = name.world;
    p.ranks = orders_.deal();
    const auto dealt = index::rank_records(store_, p);
    if (dealt.empty()) return;
    // Ranks past the records share their records (rank % dealt.size()): the list stays bounded by
    // the record count whatever rank names readers make up.
    const uint32_t dealt_rank = static_cast<uint32_t>(name.rank % dealt.size());
    if (std::find(share_ranks_.begin(), share_ranks_.end(), dealt_rank) != share_ranks_.end()) return;
    share_ranks_.push_back(dealt_rank);
    std::sort(share_ranks_.begin(), share_ranks_.end());
    share_.records.assign(store_.records().size(), false);
    uint64_t count = 0;
    for (uint32_t rank : share_ranks_) {
      for (uint32_t r : dealt[rank]) {
        if (!share_.records[r]) ++count;
        share_.records[r] = true;
      }
    }
    std::string ranks;
    for (uint32_t rank : share_ranks_) {
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(rank);
    }
    share_.what = fmt::format("the {} records of rank{} {} of {}", count, share_ranks_.size() > 1 ? "s" : "", ranks,
                              name.world);
  }
  decide_random_reads();
}

// Order names are never cached by the kernel (entry timeout 0): the next lookup of a name gets
// the new seed's order in a slot of its own, while inodes looked up before keep their orders.
void Filesystem::forget_order_files() {
  log_info("order seed {}", orders_.seed());
  {  // the ranks' records depend on the seed: the share counts again from the next rank order
    std::lock_guard lock(share_mu_);
    share_world_ = 1;
    share_ranks_.clear();
    share_ = ReadShare{};
  }
  decide_random_reads();
}

// ---- /.fidelity/stats and /.fidelity/config ------------------------------------------------------

std::string Filesystem::control_text(NodeType t) const {
  return t == NodeType::ctl_stats ? stats_json() : t == NodeType::ctl_metrics ? metrics_text() : config_json();
}

// Every counter and gauge of the mount with one value, declared once (common/readings.h): the
// stats JSON and the metrics text are both rendered from these.
Readings Filesystem::readings() const {
  using K = Reading::Kind;
  const ReadStats& io = reader_.stats();
  const RecordCache& cache = reader_.cache();
  const ViewCache& views = reader_.views();
  Readings r = {
      {"levels", K::gauge, "fidelityfs_levels", "levels of the store's JPEGs", static_cast<uint64_t>(store_.levels())},
      {"default_level", K::gauge, "fidelityfs_default_level", "the mount's default JPEG level",
       static_cast<uint64_t>(policy_.mount_default())},
      {"lookups", K::counter, "fidelityfs_lookups_total", "name lookups in the tree", lookups_.load()},
      {"reads", K::counter, "", "", reads_.load()},  // by kind and level in fidelityfs_reads_total
      {"bytes_served", K::counter, "", "", bytes_.load()},
      {"eio_errors", K::counter, "fidelityfs_eio_errors_total",
       "reads answered EIO (a piece failed its checksum or could not be read)", reader_.failures()},
      {"eio_files", K::gauge, "", "", reader_.failed_files()},
      {"level_changes", K::counter, "fidelityfs_level_changes_total",
       "levels and order seeds set or removed through user.fidelity.* attributes", changes_.changes()},
      {"level_changes_refused", K::counter, "fidelityfs_level_changes_refused_total",
       "level changes refused with EPERM (level_changes=)", change_access_.refusals()},
      {"invalidations", K::counter, "fidelityfs_invalidations_total",
       "names the kernel was told to forget after level changes", changes_.invalidations()},
      // A test waits for 0 before checking the tree at rest.
      {"invalidations_pending", K::gauge, "", "", changes_.pending()},
      {"overrides", K::gauge, "fidelityfs_level_overrides", "files and folders with a level override", policy_.override_count()},
      {"order_opens", K::counter, "", "", orders_.opens()},
  };
  source_.add_readings(r);
  r.insert(r.end(), {
      {"records_read", K::counter, "fidelityfs_prefix_loads_total", "record prefixes loaded from the store", io.records_read.load()},
      {"record_bytes", K::counter, "", "", io.record_bytes.load()},
      {"prefix_extensions", K::counter, "", "", io.prefix_extensions.load()},
      {"piece_reads", K::counter, "", "", io.piece_reads.load()},
      {"cache_hits", K::counter, "fidelityfs_cache_hits_total", "file reads served from a cached record prefix", io.cache_hits.load()},
      {"cache_misses", K::counter, "fidelityfs_cache_misses_total", "file reads served from the file's own pieces",
       io.cache_misses.load()},
      {"prefetch_hits", K::counter, "", "", io.prefetch_hits.load()},
      {"prefetch_waits", K::counter, "", "", io.prefetch_waits.load()},
      {"prefetch_issued", K::counter, "", "", io.prefetch_issued.load()},
      {"prefetch_skipped", K::counter, "", "", io.prefetch_skipped.load()},
      {"prefixes_in_flight", K::gauge, "fidelityfs_prefixes_in_flight", "record prefixes being loaded now", reader_.prefixes_loading()},
      {"l3_views.renders", K::counter, "", "", views.renders()},
      {"l3_views.hits", K::counter, "", "", views.hits()},
      {"l3_views.used", K::gauge, "", "", views.used()},
      {"l3_views.budget", K::gauge, "", "", views.budget()},
      {"sequential_made", K::counter, "fidelityfs_sequential_made_total",
       "JPEG levels made sequential (encoding=sequential), each making counted", reader_.sequential_made()},
      {"cache.budget", K::gauge, "fidelityfs_cache_budget_bytes", "the memory cache's budget (cache=)", cache.budget()},
      {"cache.used", K::gauge, "fidelityfs_cache_bytes", "bytes of record prefixes in the memory cache", cache.used()},
      {"cache.peak", K::gauge, "", "", cache.peak()},
      {"cache.entries", K::gauge, "", "", cache.entries()},
      {"cache.evictions", K::counter, "fidelityfs_cache_evictions_total", "record prefixes evicted from the memory cache",
       io.cache_evictions.load()},
  });
  return r;
}

std::string Filesystem::stats_json() const {
  nlohmann::ordered_json j;
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  j["store"] = store_.location();
  j["pid"] = static_cast<int64_t>(::getpid());  // the daemon's: to signal it, to find its /proc entries
  j["layout"] = index::layout_name(store_.layout());
  j["uptime_s"] = static_cast<uint64_t>(up);  // whole seconds: an idle mount's stats stay one file
  j["files"] = store_.files().size();
  j["dirs"] = store_.dirs().size();
  for (const Reading& r : readings()) {
    const size_t dot = r.key.find('.');
    if (dot == std::string_view::npos) j[std::string(r.key)] = r.value;
    else j[std::string(r.key.substr(0, dot))][std::string(r.key.substr(dot + 1))] = r.value;
  }
  if (!j.contains("disk_cache")) j["disk_cache"] = nullptr;
  // Reads the kernel sent us (page-cache hits never reach the daemon).
  std::vector<uint64_t> by_level;
  for (int k = 1; k <= store_.levels(); ++k) by_level.push_back(read_counts_[read_slot(index::FileKind::jpeg, k)].reads.load());
  j["reads_by_kind"] = {{"jpeg", std::accumulate(by_level.begin(), by_level.end(), uint64_t{0})},
                        {"l3", read_counts_[read_slot(index::FileKind::l3, 1)].reads.load()},
                        {"blob", read_counts_[read_slot(index::FileKind::blob, 1)].reads.load()}};
  j["jpeg_reads_by_level"] = by_level;
  nlohmann::ordered_json received, failed;
  for (size_t r = 0; r < kRequestKinds; ++r) {
    received[std::string(request_name(static_cast<Request>(r)))] = request_errors_.received_count(static_cast<Request>(r));
    failed[std::string(request_name(static_cast<Request>(r)))] = request_errors_.count(static_cast<Request>(r));
  }
  j["requests"] = received;
  j["request_errors"] = failed;
  j["prefetch_following"] = reader_.prefetcher().following();
  add_decisions(j);
  return j.dump(2) + "\n";
}

// What the mount decided and why (random reads, the GPU decoder): text and numbers together.
void Filesystem::add_decisions(nlohmann::ordered_json& j) const {
  const ReadStats& io = reader_.stats();
  {
    std::lock_guard lock(share_mu_);
    const RandomReadsDecision& d = random_reads_;
    j["random_reads"] = {{"setting", config::random_reads_name(d.setting)}, {"mode", d.records ? "records" : "pieces"},
                         {"why", d.text()}, {"needed", d.needed}, {"budget", d.budget}, {"budget_of", d.budget_name},
                         {"share", d.share}, {"loads", io.read_loads.load()}, {"room_waits", io.room_waits.load()},
                         {"local_copy_reads", io.local_copy_reads.load()}};
  }
  if (const L3Batcher* b = reader_.batcher()) {
    L3Batcher::Stats s = b->stats();
    j["gpu"] = {{"decoder", reader_.gpu()->description()}, {"jobs", s.jobs}, {"batches", s.batches},
                {"full_batches", s.full_batches}, {"failed_jobs", s.failed_jobs}, {"cpu_fallbacks", s.cpu_fallbacks},
                {"max_batch_bytes", reader_.gpu()->max_batch_bytes()}};
  } else {
    j["gpu"] = nullptr;
  }
}

// The same readings as stats_json, under their Prometheus names (docs/MOUNT.md "Metrics").
std::string Filesystem::metrics_text() const {
  MetricsText m({{"mountpoint", options_.mountpoint}});
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  // A family's samples follow its own # TYPE line: one family, then the other.
  const auto by_read_slot = [&](std::string_view name, std::string_view help, std::atomic<uint64_t> ReadCount::*field) {
    m.family(name, "counter", help);
    for (int k = 1; k <= store_.levels(); ++k)
      m.sample(name, d((read_counts_[read_slot(index::FileKind::jpeg, k)].*field).load()),
               {{"kind", "jpeg"}, {"level", std::to_string(k)}});
    for (index::FileKind kind : {index::FileKind::l3, index::FileKind::blob})
      m.sample(name, d((read_counts_[read_slot(kind, 1)].*field).load()),
               {{"kind", std::string(index::kind_name(kind))}, {"level", "1"}});
  };
  by_read_slot("fidelityfs_reads_total", "FUSE reads of tree files served (page-cache hits never reach the daemon)",
               &ReadCount::reads);
  by_read_slot("fidelityfs_read_bytes_total", "bytes those reads returned", &ReadCount::bytes);
  m.histogram("fidelityfs_read_duration_seconds", "time from a read request to its bytes, tree files", read_latency_.snapshot());
  m.family("fidelityfs_request_errors_total", "counter", "requests answered with an error, by FUSE operation");
  for (size_t r = 0; r < kRequestKinds; ++r)
    m.sample("fidelityfs_request_errors_total", d(request_errors_.count(static_cast<Request>(r))),
             {{"op", std::string(request_name(static_cast<Request>(r)))}});
  for (const Reading& r : readings()) {
    if (r.metric.empty()) continue;
    if (r.kind == Reading::Kind::counter) m.counter(r.metric, r.help, d(r.value));
    else m.gauge(r.metric, r.help, d(r.value));
  }
  m.gauge("fidelityfs_uptime_seconds", "seconds since the mount started",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  return m.text();
}

std::string Filesystem::config_json() const {
  nlohmann::ordered_json j;
  const config::Settings& s = settings_;
  j["store"] = store_.location();
  j["mountpoint"] = options_.mountpoint;
  j["config_file"] = s.config_file;
  j["levels"] = store_.levels();
  j["scan_group"] = config::level_text(s.scan_group);
  j["effective_default_level"] = policy_.mount_default();
  j["encoding"] = config::encoding_name(s.encoding);
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const auto& r : s.rules) rules.push_back({{"path", r.glob}, {"scan_group", config::level_text(r.level)}});
  j["rules"] = rules;
  j["threads"] = s.threads;
  j["cache"] = s.cache_bytes;
  j["gpu"] = config::gpu_name(s.gpu);
  j["gpu_decoder"] = reader_.gpu() ? nlohmann::ordered_json(reader_.gpu()->description()) : nlohmann::ordered_json("cpu");
  j["gpu_batch"] = s.gpu_batch;
  j["gpu_deadline_us"] = s.gpu_deadline_us;
  j["gpu_memory"] = s.gpu_memory;
  j["raw_format"] = codec::view_format_name(s.raw_format);
  j["raw_names"] = config::raw_names_name(s.raw_names);
  j["readdir"] = config::readdir_name(s.readdir);
  j["source"] = source_.describe();
  j["endpoint"] = s.endpoint;
  j["region"] = s.region;
  j["profile"] = s.profile;
  j["addressing"] = config::addressing_name(s.addressing);
  j["ca_file"] = s.ca_file;
  j["disk_cache"] = s.disk_cache;
  j["disk_cache_size"] = s.disk_cache_size;
  j["remote_requests"] = s.remote_requests;
  j["random_reads"] = config::random_reads_name(s.random_reads);
  j["order_ranks"] = config::order_ranks_name(s.order_ranks);
  j["allow_other"] = s.allow_other;
  j["level_changes"] = config::level_changers_text(s.level_changes);
  j["level_changers"] = change_access_.describe();
  j["log"] = {{"level", config::log_level_name(s.log_level)}, {"file", s.log_file}};
  return j.dump(2) + "\n";
}

}  // namespace fid::core
