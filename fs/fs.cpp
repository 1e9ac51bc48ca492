#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/fs.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <future>
#include <list>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "codec/l3_view.h"
#include "fs/l3_batcher.h"
#include "fs/inodes.h"
#include "fs/log.h"
#include "fs/orders.h"
#include "fs/prefetch.h"
#include "fs/record_cache.h"
#include "fs/policy.h"

namespace fid::fs {

using index::Dir;
using index::File;
using index::FileKind;

std::vector<uint8_t> rule_levels(const index::Store& store, const std::vector<config::Rule>& rules) {
  auto files = store.files();
  std::vector<uint8_t> out(rules.empty() ? 0 : files.size(), 0);
  if (rules.empty()) return out;
  const int L = store.levels();
  // Directory paths once, then "dir/name" per file.
  auto dirs = store.dirs();
  std::vector<std::string> dir_path(dirs.size());
  for (size_t d = 0; d < dirs.size(); ++d) dir_path[d] = store.relative_path(dirs[d]);
  std::string path;
  for (const File& f : files) {
    const std::string& dp = dir_path[f.dir];
    path.assign(dp);
    if (!path.empty()) path.push_back('/');
    path.append(store.name(f));
    for (const auto& r : rules) {
      if (config::glob_match(r.glob, path)) {
        out[f.id] = static_cast<uint8_t>(r.level >= config::kFull ? L : std::min(r.level, L));
        break;
      }
    }
  }
  return out;
}

namespace {

constexpr double kTimeout = 86400.0;
constexpr unsigned kPrefetchThreads = 2;  // the tree is immutable; level changes invalidate explicitly
constexpr const char* kXattrPrefix = "user.fidelity.";
constexpr const char* kXattrLevel = "user.fidelity.scan_group";
constexpr const char* kXattrOrderSeed = "user.fidelity.order_seed";
constexpr std::string_view kReadOnlyXattrs[] = {"kind", "levels", "bytes", "record", "position", "source_size", "format"};
constexpr std::string_view kViewExtensions[] = {".png", ".pgm", ".ppm", ".npy"};

// The last rendered views of l3 files, bounded in bytes, so that a file read in many requests
// (128 KiB readahead chunks of a 6 MB view) is decoded once. A view being rendered is shared
// with concurrent readers of the same file. The most recent view is kept even if it alone is
// over the budget (a larger view would otherwise be decoded once per request).
class ViewCache {
 public:
  using View = std::shared_ptr<const codec::HostBuffer>;  // null: the render failed
  explicit ViewCache(uint64_t budget) : budget_(budget) {}

  template <typename Render>
  View get(uint32_t file, Render&& render) {
    std::unique_lock lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->file != file) continue;
      entries_.splice(entries_.begin(), entries_, it);  // most recently used first
      auto fut = it->view;
      lock.unlock();
      hits_.fetch_add(1, std::memory_order_relaxed);
      return fut.get();
    }
    std::promise<View> promise;
    entries_.push_front(Entry{file, promise.get_future().share(), 0});
    lock.unlock();
    View v;
    try {
      v = render();
    } catch (...) {
      v = nullptr;
    }
    promise.set_value(v);
    renders_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->file != file || it->bytes != 0) continue;
      if (!v) {
        entries_.erase(it);  // not cached: the next read tries again
      } else {
        it->bytes = v->size();
        used_ += it->bytes;
      }
      break;
    }
    // Evict least recently used finished views beyond the budget, never the one just rendered.
    for (auto it = entries_.end(); used_ > budget_ && it != entries_.begin();) {
      --it;
      if (it->bytes == 0 || it->file == file) continue;  // being rendered, or just rendered
      used_ -= it->bytes;
      it = entries_.erase(it);
    }
    return v;
  }
  uint64_t used() const {
    std::lock_guard lock(mu_);
    return used_;
  }
  uint64_t budget() const { return budget_; }
  uint64_t hits() const { return hits_.load(); }
  uint64_t renders() const { return renders_.load(); }

 private:
  struct Entry {
    uint32_t file;
    std::shared_future<View> view;
    uint64_t bytes;  // 0 while rendering
  };
  const uint64_t budget_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;
  uint64_t used_ = 0;
  std::atomic<uint64_t> hits_{0}, renders_{0};
};

// Control-file snapshots kept for readers that looked one up (each lookup makes a new one).
constexpr size_t kSnapshotsKept = 256;

class Filesystem {
 public:
  Filesystem(const index::Store& store, const config::Settings& settings, const ServeRequest& req)
      : store_(store),
        settings_(settings),
        mountpoint_(req.mountpoint),
        L_(store.levels()),
        inodes_(static_cast<uint32_t>(store.dirs().size()), static_cast<uint32_t>(store.files().size()),
                store.levels()),
        policy_(make_policy(store, settings)),
        known_((store.files().size() + 63) / 64),
        reads_by_level_(static_cast<size_t>(store.levels()) + 1),
        order_slots_(kOrderSlots),
        order_contents_(store, 4, &display_names_),
        order_seed_(settings.order_seed.value_or(store.seed())),
        view_format_(static_cast<codec::ViewFormat>(settings.raw_format)),
        views_(std::max<uint64_t>(settings.cache_bytes / 4, 8ull << 20)),
        started_(std::chrono::steady_clock::now()) {
    static_assert(static_cast<int>(config::RawFormat::png) == static_cast<int>(codec::ViewFormat::png) &&
                  static_cast<int>(config::RawFormat::ppm) == static_cast<int>(codec::ViewFormat::ppm) &&
                  static_cast<int>(config::RawFormat::npy) == static_cast<int>(codec::ViewFormat::npy));
    if (settings.raw_names == config::RawNames::ext) {
      for (const File& f : store.files())
        if (f.kind == FileKind::l3)
          display_names_.emplace(f.id, std::string(store.name(f)) + std::string(codec::view_extension(shape_of(f), view_format_)));
    }
    uid_ = ::getuid();
    gid_ = ::getgid();
    for (const auto& r : store.records()) store_bytes_ += r.size;
    reader_ = std::make_unique<RecordReader>(store, io_);
    if (reader_->uses_io_uring()) {
      log_info("piece reads: io_uring (the pieces of a read are issued together)");
    } else {
      std::string why;
      RecordReader::io_uring_available(&why);
      log_info("piece reads: one pread after another (io_uring unavailable: {})", why);
    }
    cache_ = std::make_unique<RecordCache>(store, *reader_, io_, settings.cache_bytes);
    prefetch_ = std::make_unique<Prefetcher>(store, *cache_, io_, settings.cache_bytes / 4 * 3, kPrefetchThreads,
                                             settings.order_window);
    if (req.l3_decoder) {
      l3_decoder_ = req.l3_decoder;
      batcher_ = std::make_unique<L3Batcher>(
          *req.l3_decoder, L3Batcher::Options{settings.gpu_batch, std::chrono::microseconds(settings.gpu_deadline_us)},
          [this](const std::string& why) {
            // A broken device fails every batch: log the 1st, 10th, 100th... failure, not each.
            const uint64_t n = ++gpu_failures_;
            uint64_t p = 1;
            while (p < n) p *= 10;
            if (p == n) log_error("the GPU decoder failed {} time(s), last: {}; those batches were decoded on the CPU", n, why);
          });
    }
  }

  void set_session(fuse_session* se) { se_ = se; }
  static const fuse_lowlevel_ops& ops();

 private:
  static LevelPolicy make_policy(const index::Store& store, const config::Settings& s) {
    std::vector<uint32_t> parent, fdir;
    parent.reserve(store.dirs().size());
    for (const Dir& d : store.dirs()) parent.push_back(d.parent);
    fdir.reserve(store.files().size());
    for (const File& f : store.files()) fdir.push_back(f.dir);
    int def = s.scan_group >= config::kFull ? store.levels() : std::min(s.scan_group, store.levels());
    return LevelPolicy(store.levels(), std::max(def, 1), std::move(parent), std::move(fdir),
                       rule_levels(store, s.rules));
  }

  static Filesystem& self(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

  // ---- l3 views -------------------------------------------------------------------------------

  static codec::L3Shape shape_of(const File& f) {
    codec::L3Shape s;
    codec::shape_from_code(f.script, f.width, f.height, s);  // validated when the store was opened
    return s;
  }
  // Bytes a read of the file returns (l3: its decoded view; others: the store's size at level).
  uint64_t file_size(const File& f, int level) const {
    if (f.kind == FileKind::l3) return codec::l3_view_size(shape_of(f), view_format_);
    return store_.size_at_level(f, level);
  }
  // The name a file has in the mount (raw_names=ext: an l3 file's name + its view's extension).
  std::string_view display_name(const File& f) const {
    if (!display_names_.empty() && f.kind == FileKind::l3) {
      auto it = display_names_.find(f.id);
      if (it != display_names_.end()) return it->second;
    }
    return store_.name(f);
  }

  // ---- attributes ---------------------------------------------------------------------------

  // The inode a live file has now: its effective level (non-JPEG files have one content).
  uint64_t live_file_ino(uint32_t f) const {
    return inodes_.live_file(f, store_.files()[f].kind == FileKind::jpeg ? policy_.effective(f) : L_);
  }

  static void set_time(struct stat& st, int64_t ns) {
    st.st_mtim.tv_sec = ns / 1000000000;
    st.st_mtim.tv_nsec = ns % 1000000000;
    if (st.st_mtim.tv_nsec < 0) {
      st.st_mtim.tv_nsec += 1000000000;
      st.st_mtim.tv_sec -= 1;
    }
    st.st_atim = st.st_mtim;
    st.st_ctim = st.st_mtim;
  }

  bool stat_of(uint64_t ino, struct stat& st) {
    std::memset(&st, 0, sizeof st);
    Node n = inodes_.decode(ino);
    st.st_ino = ino;
    st.st_uid = uid_;
    st.st_gid = gid_;
    st.st_blksize = 128 * 1024;
    switch (n.type) {
      case NodeType::dir: {
        if (n.id >= store_.dirs().size()) return false;
        const Dir& d = store_.dirs()[n.id];
        st.st_mode = S_IFDIR | 0555;
        st.st_nlink = 2 + d.subdir_count + (n.view == 0 && n.id == 0 ? 1 : 0);
        st.st_size = 4096;
        set_time(st, d.mtime_ns);
        return true;
      }
      case NodeType::file: {
        if (n.id >= store_.files().size()) return false;
        const File& f = store_.files()[n.id];
        int level = n.level;
        st.st_mode = S_IFREG | 0444;
        st.st_nlink = 1;
        st.st_size = static_cast<off_t>(file_size(f, level));
        st.st_blocks = (st.st_size + 511) / 512;
        set_time(st, f.mtime_ns);
        return true;
      }
      case NodeType::ctl_root:
      case NodeType::ctl_sg:
      case NodeType::ctl_order:
        st.st_mode = S_IFDIR | 0555;
        st.st_nlink = 2 + (n.type == NodeType::ctl_root ? 2 : n.type == NodeType::ctl_sg ? static_cast<unsigned>(L_) : 0);
        st.st_size = 4096;
        set_time(st, store_.dirs().empty() ? 0 : store_.dirs()[0].mtime_ns);
        return true;
      case NodeType::ctl_stats:
      case NodeType::ctl_config:
        st.st_mode = S_IFREG | 0444;
        st.st_nlink = 1;
        st.st_size = static_cast<off_t>(snapshot(n).size());
        set_time(st, store_.dirs().empty() ? 0 : store_.dirs()[0].mtime_ns);
        return true;
      case NodeType::order_file: {
        auto text = order_text(n.id);
        if (!text) return false;
        st.st_mode = S_IFREG | 0444;
        st.st_nlink = 1;
        st.st_size = static_cast<off_t>(text->size());
        set_time(st, store_.dirs().empty() ? 0 : store_.dirs()[0].mtime_ns);
        return true;
      }
      case NodeType::invalid:
        return false;
    }
    return false;
  }

  void mark_known(const Node& n) {
    if (n.type == NodeType::file && n.view == 0)
      known_[n.id / 64].fetch_or(uint64_t{1} << (n.id % 64), std::memory_order_relaxed);
  }
  bool is_known(uint32_t f) const {
    return (known_[f / 64].load(std::memory_order_relaxed) >> (f % 64)) & 1;
  }

  // ---- order files ----------------------------------------------------------------------------

  std::shared_ptr<const std::string> order_text(uint32_t slot) {
    auto name = order_slots_.name_of(slot);
    if (!name) return nullptr;
    return order_contents_.get(order_seed_.load(), settings_.order_window, *name);
  }
  // A reader took an order: the prefetcher follows it from now on.
  void order_opened(uint32_t slot) {
    auto name = order_slots_.name_of(slot);
    if (!name) return;
    order_opens_.fetch_add(1, std::memory_order_relaxed);
    prefetch_->follow(order_seed_.load(), name->epoch, name->world);
  }
  void set_order_seed(uint64_t seed) {
    uint64_t old = order_seed_.exchange(seed);
    if (old == seed) return;
    log_info("order seed {} (was {})", seed, old);
    // Order names are never cached by the kernel (entry timeout 0), but the inodes of the orders
    // already looked up keep pages and sizes: drop them so the next read sees the new orders.
    if (!se_) return;
    for (uint32_t slot = 0; slot < order_slots_.size(); ++slot)
      if (order_slots_.name_of(slot)) fuse_lowlevel_notify_inval_inode(se_, inodes_.order_file(slot), 0, 0);
  }

  // ---- control files --------------------------------------------------------------------------

  std::string control_content(NodeType t) const {
    nlohmann::ordered_json j;
    if (t == NodeType::ctl_stats) {
      double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      j["store"] = store_.path().string();
      j["uptime_s"] = static_cast<uint64_t>(up);  // whole seconds: an idle mount's stats stay one file
      j["files"] = store_.files().size();
      j["dirs"] = store_.dirs().size();
      j["levels"] = L_;
      j["lookups"] = lookups_.load();
      // Reads the kernel sent us (page-cache hits never reach the daemon).
      j["reads_by_kind"] = {{"jpeg", reads_by_kind_[0].load()}, {"l3", reads_by_kind_[1].load()}, {"blob", reads_by_kind_[2].load()}};
      std::vector<uint64_t> by_level;
      for (int k = 1; k <= L_; ++k) by_level.push_back(reads_by_level_[static_cast<size_t>(k)].load());
      j["jpeg_reads_by_level"] = by_level;
      j["reads"] = reads_.load();
      j["bytes_served"] = bytes_.load();
      j["eio_errors"] = eio_.load();
      {
        std::lock_guard lock(eio_mu_);
        j["eio_files"] = eio_files_.size();
      }
      j["level_changes"] = level_changes_.load();
      j["invalidations"] = invalidations_.load();
      {
        std::lock_guard lock(deferred_mu_);  // a test waits for 0 before checking the tree at rest
        j["invalidations_pending"] = deferred_pending_;
      }
      j["overrides"] = policy_.override_count();
      j["order_opens"] = order_opens_.load();
      j["storage_bytes"] = io_.storage_bytes.load();
      j["storage_reads"] = io_.storage_reads.load();
      j["records_read"] = io_.records_read.load();
      j["record_bytes"] = io_.record_bytes.load();
      j["piece_reads"] = io_.piece_reads.load();
      j["cache_hits"] = io_.cache_hits.load();
      j["cache_misses"] = io_.cache_misses.load();
      j["prefetch_hits"] = io_.prefetch_hits.load();
      j["prefetch_waits"] = io_.prefetch_waits.load();
      j["prefetch_issued"] = io_.prefetch_issued.load();
      j["prefetch_skipped"] = io_.prefetch_skipped.load();
      j["prefetch_following"] = prefetch_->following();
      j["l3_views"] = {{"renders", views_.renders()}, {"hits", views_.hits()}, {"used", views_.used()},
                       {"budget", views_.budget()}};
      if (batcher_) {
        L3Batcher::Stats b = batcher_->stats();
        j["gpu"] = {{"decoder", l3_decoder_->description()}, {"jobs", b.jobs}, {"batches", b.batches},
                    {"full_batches", b.full_batches}, {"failed_jobs", b.failed_jobs}, {"cpu_fallbacks", b.cpu_fallbacks},
                    {"max_batch_bytes", l3_decoder_->max_batch_bytes()}};
      } else {
        j["gpu"] = nullptr;
      }
      j["cache"] = {{"budget", cache_->budget()}, {"used", cache_->used()}, {"peak", cache_->peak()},
                    {"entries", cache_->entries()}, {"evictions", io_.cache_evictions.load()}};
      return j.dump(2) + "\n";
    }
    j["store"] = store_.path().string();
    j["mountpoint"] = mountpoint_;
    j["config_file"] = settings_.config_file;
    j["levels"] = L_;
    j["scan_group"] = config::level_text(settings_.scan_group);
    j["effective_default_level"] = policy_.mount_default();
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    for (const auto& r : settings_.rules) rules.push_back({{"path", r.glob}, {"scan_group", config::level_text(r.level)}});
    j["rules"] = rules;
    j["threads"] = settings_.threads;
    j["cache"] = settings_.cache_bytes;
    j["gpu"] = config::gpu_name(settings_.gpu);
    j["gpu_decoder"] = l3_decoder_ ? nlohmann::ordered_json(l3_decoder_->description()) : nlohmann::ordered_json("cpu");
    j["gpu_batch"] = settings_.gpu_batch;
    j["gpu_deadline_us"] = settings_.gpu_deadline_us;
    j["gpu_memory"] = settings_.gpu_memory;
    j["raw_format"] = config::raw_format_name(settings_.raw_format);
    j["raw_names"] = config::raw_names_name(settings_.raw_names);
    j["readdir"] = config::readdir_name(settings_.readdir);
    j["allow_other"] = settings_.allow_other;
    j["log"] = {{"level", config::log_level_name(settings_.log_level)}, {"file", settings_.log_file}};
    return j.dump(2) + "\n";
  }

  // An immutable snapshot of a control file with its current content: the kernel may cache it
  // like any other file. While the content does not change, lookups return the same snapshot, so
  // tools which stat a path and then open it (cp, rsync) see one file. Returns its inode.
  uint64_t new_snapshot(NodeType t) {
    std::string content = control_content(t);
    const size_t which = t == NodeType::ctl_config ? 1 : 0;
    std::lock_guard lock(snap_mu_);
    auto& [last_gen, last_content] = latest_snapshot_[which];
    if (last_content && *last_content == content) return inodes_.ctl_snapshot(t, last_gen);
    uint64_t gen = next_snapshot_++;
    snapshots_.emplace_back(gen, content);
    if (snapshots_.size() > kSnapshotsKept) snapshots_.pop_front();
    last_gen = gen;
    last_content = std::move(content);
    return inodes_.ctl_snapshot(t, gen);
  }
  // The content of a snapshot inode; regenerated (fresh) if it was dropped from the window.
  std::string snapshot(const Node& n) const {
    {
      std::lock_guard lock(snap_mu_);
      for (const auto& [gen, content] : snapshots_)
        if (gen == n.snapshot) return content;
    }
    return control_content(n.type);
  }

  // ---- directory entries ----------------------------------------------------------------------

  struct Entry {
    std::string_view name;
    uint64_t ino = 0;
    mode_t type = 0;
  };

  // Entry i of a directory listing ("." and ".." first), or nullopt past the end.
  std::optional<Entry> entry_at(uint64_t dir_ino, const Node& n, size_t i) {
    static constexpr std::string_view kNames[] = {"stats", "config", "sg", "order"};
    if (i == 0) return Entry{".", dir_ino, S_IFDIR};
    if (n.type == NodeType::dir) {
      const Dir& d = store_.dirs()[n.id];
      if (i == 1) {
        uint64_t parent = (n.view && n.id == 0) ? inodes_.ctl_sg() : inodes_.dir(d.parent, n.view);
        return Entry{"..", parent, S_IFDIR};
      }
      size_t k = i - 2;
      if (k < d.subdir_count) {
        uint32_t c = store_.child_dirs()[d.subdir_begin + k];
        return Entry{store_.name(store_.dirs()[c]), inodes_.dir(c, n.view), S_IFDIR};
      }
      k -= d.subdir_count;
      if (k < d.file_count) {
        uint32_t c = store_.child_files()[d.file_begin + k];
        return Entry{display_name(store_.files()[c]), n.view ? inodes_.view_file(c, n.view) : live_file_ino(c), S_IFREG};
      }
      return std::nullopt;
    }
    if (n.type == NodeType::ctl_root) {
      if (i == 1) return Entry{"..", inodes_.dir(0), S_IFDIR};
      if (i - 2 < 4) {
        uint64_t ino = i - 2 == 0   ? new_snapshot(NodeType::ctl_stats)
                       : i - 2 == 1 ? new_snapshot(NodeType::ctl_config)
                       : i - 2 == 2 ? inodes_.ctl_sg()
                                    : inodes_.ctl_order();
        return Entry{kNames[i - 2], ino, i - 2 >= 2 ? mode_t(S_IFDIR) : mode_t(S_IFREG)};
      }
      return std::nullopt;
    }
    if (n.type == NodeType::ctl_order) {  // order files are reachable by name, never listed
      if (i == 1) return Entry{"..", inodes_.ctl_root(), S_IFDIR};
      return std::nullopt;
    }
    if (n.type == NodeType::ctl_sg) {
      if (i == 1) return Entry{"..", inodes_.ctl_root(), S_IFDIR};
      size_t k = i - 2;
      if (k < static_cast<size_t>(L_)) return Entry{level_names_[k], inodes_.dir(0, static_cast<int>(k) + 1), S_IFDIR};
      return std::nullopt;
    }
    return std::nullopt;
  }

  uint64_t lookup_child(const Node& n, std::string_view name, uint64_t* generation = nullptr) {
    if (n.type == NodeType::dir) {
      const Dir& d = store_.dirs()[n.id];
      if (n.view == 0 && n.id == 0 && name == ".fidelity") return inodes_.ctl_root();
      auto cd = store_.child_dirs().subspan(d.subdir_begin, d.subdir_count);
      auto it = std::lower_bound(cd.begin(), cd.end(), name, [&](uint32_t c, std::string_view v) {
        return store_.name(store_.dirs()[c]) < v;
      });
      if (it != cd.end() && store_.name(store_.dirs()[*it]) == name) return inodes_.dir(*it, n.view);
      auto cf = store_.child_files().subspan(d.file_begin, d.file_count);
      auto jt = std::lower_bound(cf.begin(), cf.end(), name, [&](uint32_t c, std::string_view v) {
        return store_.name(store_.files()[c]) < v;
      });
      auto found = [&](uint32_t c) { return n.view ? inodes_.view_file(c, n.view) : live_file_ino(c); };
      if (jt != cf.end() && store_.name(store_.files()[*jt]) == name &&
          display_name(store_.files()[*jt]).size() == name.size())
        return found(*jt);
      if (!display_names_.empty()) {  // raw_names=ext: "a.png.ppm" is l3 file "a.png"
        for (std::string_view ext : kViewExtensions) {
          if (name.size() <= ext.size() || name.substr(name.size() - ext.size()) != ext) continue;
          std::string_view base = name.substr(0, name.size() - ext.size());
          auto bt = std::lower_bound(cf.begin(), cf.end(), base, [&](uint32_t c, std::string_view v) {
            return store_.name(store_.files()[c]) < v;
          });
          if (bt != cf.end() && store_.name(store_.files()[*bt]) == base && display_name(store_.files()[*bt]) == name)
            return found(*bt);
        }
      }
      return 0;
    }
    if (n.type == NodeType::ctl_root) {
      if (name == "stats") return new_snapshot(NodeType::ctl_stats);
      if (name == "config") return new_snapshot(NodeType::ctl_config);
      if (name == "sg") return inodes_.ctl_sg();
      if (name == "order") return inodes_.ctl_order();
      return 0;
    }
    if (n.type == NodeType::ctl_order) {
      auto on = parse_order_name(name);
      if (!on) return 0;
      return inodes_.order_file(order_slots_.acquire(*on, generation));
    }
    if (n.type == NodeType::ctl_sg) {
      auto v = config::parse_level(name);
      if (v && *v != config::kFull && *v <= L_ && name == std::to_string(*v)) return inodes_.dir(0, *v);
      return 0;
    }
    return 0;
  }

  // ---- request handlers -----------------------------------------------------------------------

  static void op_init(void* userdata, fuse_conn_info* conn) {
    auto& fs = *static_cast<Filesystem*>(userdata);
    // readdir=plus: one round trip fills dentries + attrs; plain: names only (LOOKUP at open);
    // auto: the kernel picks per listing.
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    if (fs.settings_.readdir != config::Readdir::plain && (conn->capable & FUSE_CAP_READDIRPLUS)) {
      conn->want |= FUSE_CAP_READDIRPLUS;
      if (fs.settings_.readdir == config::Readdir::auto_ && (conn->capable & FUSE_CAP_READDIRPLUS_AUTO))
        conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
    }
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;  // inodes are immutable: cached pages stay valid
    // Without OPEN requests an O_TRUNC open must reach us as a SETATTR (which gets EROFS).
    conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_readahead = std::max<unsigned>(conn->max_readahead, 1u << 20);
    log_info("mounted {} at {} ({} files, {} dirs, {} levels, default level {})", fs.store_.path().string(),
             fs.mountpoint_, fs.store_.files().size(), fs.store_.dirs().size(), fs.L_, fs.policy_.mount_default());
  }

  static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    auto& fs = self(req);
    Node pn = fs.inodes_.decode(parent);
    // Lookups in the tree only: counting those of /.fidelity itself would change stats at every
    // lookup of stats, and every stat-then-open (cp) would see two different snapshots.
    if (pn.type == NodeType::dir) fs.lookups_.fetch_add(1, std::memory_order_relaxed);
    fuse_entry_param e{};
    e.attr_timeout = kTimeout;
    e.entry_timeout = kTimeout;
    if (!is_dir_node(pn.type)) {
      fuse_reply_err(req, pn.type == NodeType::invalid ? ENOENT : ENOTDIR);
      return;
    }
    uint64_t generation = 1;
    uint64_t ino = fs.lookup_child(pn, name, &generation);
    if (ino == 0) {  // negative entry, cached for the timeout (the tree never changes)
      e.ino = 0;
      fuse_reply_entry(req, &e);
      return;
    }
    if (!fs.stat_of(ino, e.attr)) {
      fuse_reply_err(req, EIO);
      return;
    }
    e.ino = ino;
    e.generation = generation;
    Node cn = fs.inodes_.decode(ino);
    // A control file's name moves to a new snapshot when its content changes, and an order file's
    // slot may be reused: never cache those names, only the (immutable) inodes.
    if (cn.type == NodeType::ctl_stats || cn.type == NodeType::ctl_config || cn.type == NodeType::order_file)
      e.entry_timeout = 0;
    fs.mark_known(cn);
    fuse_reply_entry(req, &e);
  }

  static void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }
  static void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

  static void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    auto& fs = self(req);
    struct stat st;
    if (!fs.stat_of(ino, st)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_reply_attr(req, &st, kTimeout);  // every inode is immutable
  }

  static void op_erofs(fuse_req_t req) { fuse_reply_err(req, EROFS); }
  static void op_setattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { op_erofs(req); }
  static void op_mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { op_erofs(req); }
  static void op_mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { op_erofs(req); }
  static void op_unlink(fuse_req_t req, fuse_ino_t, const char*) { op_erofs(req); }
  static void op_symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { op_erofs(req); }
  static void op_rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) { op_erofs(req); }
  static void op_link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { op_erofs(req); }
  static void op_write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) { op_erofs(req); }
  static void op_create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { op_erofs(req); }
  static void op_fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { op_erofs(req); }
  static void op_readlink(fuse_req_t req, fuse_ino_t) { fuse_reply_err(req, EINVAL); }

  static void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    if (n.type == NodeType::invalid) fuse_reply_err(req, ENOENT);
    else if (mask & W_OK) fuse_reply_err(req, EROFS);
    else fuse_reply_err(req, 0);
  }

  // Files are never opened: the daemon answers OPEN with ENOSYS once, after which the kernel
  // sends no OPEN/RELEASE at all and keeps every cached page (inodes are immutable). A warm
  // read then never reaches the daemon.
  static void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Node n = self(req).inodes_.decode(ino);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) fuse_reply_err(req, EROFS);
    else if (n.type == NodeType::invalid) fuse_reply_err(req, ENOENT);
    else if (is_dir_node(n.type)) fuse_reply_err(req, EISDIR);
    else fuse_reply_err(req, ENOSYS);
  }

  void note_eio(const File& f, uint32_t piece) {
    eio_.fetch_add(1, std::memory_order_relaxed);
    bool first;
    {
      std::lock_guard lock(eio_mu_);
      first = eio_files_.insert(f.id).second;
    }
    if (first)
      log_error("{}: piece {} of record {} fails its checksum or cannot be read; the file returns EIO",
                store_.relative_path(f), piece, store_.records()[f.record].path);
  }

  static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    fs.reads_.fetch_add(1, std::memory_order_relaxed);
    if (n.type == NodeType::ctl_stats || n.type == NodeType::ctl_config || n.type == NodeType::order_file) {
      std::string c;
      if (n.type == NodeType::order_file) {
        auto text = fs.order_text(n.id);
        if (!text) {
          fuse_reply_err(req, ENOENT);
          return;
        }
        if (off == 0) fs.order_opened(n.id);
        c = *text;
      } else {
        c = fs.snapshot(n);
      }
      size_t o = std::min(static_cast<size_t>(off), c.size());
      size_t len = std::min(size, c.size() - o);
      fs.bytes_.fetch_add(len, std::memory_order_relaxed);
      fuse_reply_buf(req, c.data() + o, len);
      return;
    }
    if (n.type != NodeType::file || n.id >= fs.store_.files().size()) {
      fuse_reply_err(req, n.type == NodeType::invalid || n.type == NodeType::file ? ENOENT : EISDIR);
      return;
    }
    const File& f = fs.store_.files()[n.id];
    fs.reads_by_kind_[static_cast<size_t>(f.kind) % 3].fetch_add(1, std::memory_order_relaxed);
    if (f.kind == FileKind::jpeg) fs.reads_by_level_[static_cast<size_t>(n.level)].fetch_add(1, std::memory_order_relaxed);
    fs.serve_read(req, f, n.level, size, off);
  }

  // Replies with bytes [off, off+size) of `f` at `level`: the pieces the range touches are read
  // whole (their checksums cover whole pieces) and the EOI is appended after the last one.
  void serve_read(fuse_req_t req, const File& f, int level, size_t size, off_t off) {
    thread_local std::vector<uint8_t> out, tmp;
    if (off == 0) prefetch_->on_access(f.id, level);
    if (f.kind == FileKind::l3) {
      serve_l3(req, f, size, off);
      return;
    }
    // A cached prefix of the file's record (loaded ahead, or being loaded: waited for) serves the
    // whole read; otherwise the file's own pieces are read.
    std::shared_ptr<const Prefix> pre = cache_->get(f.record, cache_->level_for(f, level));
    if (!pre) io_.cache_misses.fetch_add(1, std::memory_order_relaxed);
    auto pieces = store_.pieces(f);
    const uint32_t np = store_.pieces_at_level(f, level);
    const bool eoi = f.kind == FileKind::jpeg;
    uint64_t total = 0;
    for (uint32_t i = 0; i < np; ++i) total += pieces[i].size;
    if (eoi) total += 2;
    uint64_t begin = std::min<uint64_t>(static_cast<uint64_t>(off), total);
    uint64_t end = std::min<uint64_t>(begin + size, total);
    if (begin >= end) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    out.resize(end - begin);
    uint64_t pos = 0;
    if (pre) {
      for (uint32_t i = 0; i < np && pos < end; ++i) {
        const index::Piece& pc = pieces[i];
        uint64_t ps = pc.size;
        uint64_t a = std::max(pos, begin), b = std::min(pos + ps, end);
        if (a < b) {
          int rc = -EIO;
          if (pc.offset + ps <= pre->len) {
            std::span<const uint8_t> src(pre->data + pc.offset, ps);
            if (index::piece_checksum(src) == pc.checksum) {
              rc = 0;
              std::memcpy(out.data() + (a - begin), src.data() + (a - pos), b - a);
            }
          }
          if (rc != 0) {
            note_eio(f, i);
            fuse_reply_err(req, EIO);
            return;
          }
        }
        pos += ps;
      }
    } else {
      // The pieces the range touches, read together: whole ones straight into the reply, the
      // (at most two) partly covered ones into tmp, copied out once verified.
      thread_local std::vector<PieceRead> reads;
      struct Part {
        size_t read;
        uint64_t from, to, at;  // bytes [from, to) of the piece go to out[at...]
      };
      Part parts[2];
      size_t nparts = 0;
      uint64_t tmp_len = 0;
      for (uint32_t i = 0; i < np && pos < end; pos += pieces[i++].size)
        if (pos + pieces[i].size > begin && (pos < begin || pos + pieces[i].size > end)) tmp_len += pieces[i].size;
      tmp.resize(tmp_len);
      reads.clear();
      pos = 0;
      tmp_len = 0;
      for (uint32_t i = 0; i < np && pos < end; ++i) {
        uint64_t ps = pieces[i].size;
        uint64_t a = std::max(pos, begin), b = std::min(pos + ps, end);
        if (a < b) {
          if (a == pos && b == pos + ps) {
            reads.push_back({i, {out.data() + (pos - begin), ps}});
          } else {
            parts[nparts++] = {reads.size(), a - pos, b - pos, a - begin};
            reads.push_back({i, {tmp.data() + tmp_len, ps}});
            tmp_len += ps;
          }
        }
        pos += ps;
      }
      size_t failed = 0;
      int rc = reader_->read_pieces(f, reads, &failed);
      if (rc != 0) {
        if (rc == -EIO) note_eio(f, reads[failed].index);
        fuse_reply_err(req, rc == -EIO ? EIO : -rc);
        return;
      }
      for (size_t k = 0; k < nparts; ++k) {
        const Part& p = parts[k];
        std::memcpy(out.data() + p.at, reads[p.read].dst.data() + p.from, p.to - p.from);
      }
    }
    if (eoi) {
      static constexpr uint8_t kEoi[2] = {0xFF, 0xD9};
      for (uint64_t p = std::max(pos, begin); p < end; ++p) out[p - begin] = kEoi[p - pos];
    }
    bytes_.fetch_add(end - begin, std::memory_order_relaxed);
    fuse_reply_buf(req, reinterpret_cast<const char*>(out.data()), end - begin);
  }

  // Reads the one piece of a whole-layout file (l3, blob) into `buf`: from the cached record
  // prefix when there is one, else from its record file. 0 or -errno (-EIO: checksum).
  int read_payload(const File& f, std::vector<uint8_t>& buf) {
    const index::Piece& pc = store_.pieces(f)[0];
    buf.resize(pc.size);
    std::shared_ptr<const Prefix> pre = cache_->get(f.record, cache_->level_for(f, L_));
    if (!pre) {
      io_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      return reader_->read_piece(f, 0, buf);
    }
    if (pc.offset + pc.size > pre->len) return -EIO;
    std::span<const uint8_t> src(pre->data + pc.offset, pc.size);
    if (index::piece_checksum(src) != pc.checksum) return -EIO;
    std::memcpy(buf.data(), src.data(), pc.size);
    return 0;
  }

  // An l3 file reads as its decoded view (codec::render_l3_view), rendered once per file into
  // the view cache and served from there. With a GPU the view lives in pinned memory, the
  // decode goes through the batcher, and the reply is sent from that pinned buffer.
  void serve_l3(fuse_req_t req, const File& f, size_t size, off_t off) {
    const uint64_t total = file_size(f, L_);
    uint64_t begin = std::min<uint64_t>(static_cast<uint64_t>(off), total);
    uint64_t end = std::min<uint64_t>(begin + size, total);
    if (begin >= end) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    int err = 0;
    ViewCache::View v = views_.get(f.id, [&]() -> ViewCache::View {
      std::vector<uint8_t> payload;  // the compressed payload, freed once the view is rendered
      int rc = read_payload(f, payload);
      if (rc != 0) {
        err = rc;
        return nullptr;
      }
      std::string error;
      codec::L3Payload p;
      std::shared_ptr<codec::HostBuffer> view =
          l3_decoder_ ? l3_decoder_->allocate(total) : codec::HostBuffer::heap(total);
      codec::L3DecodeFn decode;
      if (batcher_)
        decode = [this](std::span<const uint8_t> l3, std::span<uint8_t> px, std::string& e) {
          return batcher_->decode(l3, px, e);
        };
      if (!codec::parse_l3_payload(payload, p, error) ||
          !codec::render_l3_view(p, view_format_, view->span(), error, decode)) {
        log_error("{}: the L3 payload does not decode: {}", store_.relative_path(f), error);
        err = -EIO;
        return nullptr;
      }
      return view;
    });
    if (!v || v->size() != total) {
      if (err == 0 || err == -EIO) note_eio(f, 0);
      fuse_reply_err(req, err == 0 || err == -EIO ? EIO : -err);
      return;
    }
    bytes_.fetch_add(end - begin, std::memory_order_relaxed);
    fuse_reply_buf(req, reinterpret_cast<const char*>(v->data() + begin), end - begin);
  }

  static void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    if (n.type == NodeType::invalid) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (!is_dir_node(n.type)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
      fuse_reply_err(req, EROFS);
      return;
    }
    fi->cache_readdir = 1;  // listings never change
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  }

  void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
    Node n = inodes_.decode(ino);
    if (!is_dir_node(n.type)) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t i = static_cast<size_t>(off);; ++i) {
      auto e = entry_at(ino, n, i);
      if (!e) break;
      std::string name(e->name);
      size_t need;
      if (plus) {
        fuse_entry_param ep{};
        bool dot = e->name == "." || e->name == "..";
        if (!stat_of(e->ino, ep.attr)) break;
        ep.ino = e->ino;
        ep.generation = 1;
        Node cn = inodes_.decode(e->ino);
        bool renewed = cn.type == NodeType::ctl_stats || cn.type == NodeType::ctl_config || cn.type == NodeType::order_file;
        ep.attr_timeout = kTimeout;
        ep.entry_timeout = renewed ? 0 : kTimeout;
        need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &ep, static_cast<off_t>(i + 1));
        if (need > size - used) break;
        if (!dot) mark_known(cn);
      } else {
        struct stat st {};
        st.st_ino = e->ino;
        st.st_mode = e->type;
        need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st, static_cast<off_t>(i + 1));
        if (need > size - used) break;
      }
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    self(req).do_readdir(req, ino, size, off, false);
  }
  static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    self(req).do_readdir(req, ino, size, off, true);
  }

  static void op_statfs(fuse_req_t req, fuse_ino_t) {
    auto& fs = self(req);
    struct statvfs st {};
    st.f_bsize = 4096;
    st.f_frsize = 4096;
    st.f_blocks = (fs.store_bytes_ + 4095) / 4096;
    st.f_files = fs.store_.files().size() + fs.store_.dirs().size();
    st.f_namemax = 255;
    st.f_flag = ST_NOSUID | ST_NODEV;
    fuse_reply_statfs(req, &st);
  }

  // ---- xattrs ---------------------------------------------------------------------------------

  static void reply_value(fuse_req_t req, const std::string& v, size_t size) {
    if (size == 0) fuse_reply_xattr(req, v.size());
    else if (size < v.size()) fuse_reply_err(req, ERANGE);
    else fuse_reply_buf(req, v.data(), v.size());
  }

  // Value of a user.fidelity.* attribute, or nullopt (ENODATA).
  std::optional<std::string> xattr_value(const Node& n, std::string_view key) const {
    if (n.type == NodeType::dir) {
      if (key == "scan_group") return std::to_string(n.view ? n.view : policy_.dir_effective(n.id));
      if (key == "order_seed" && n.view == 0 && n.id == 0) return std::to_string(order_seed_.load());
      return std::nullopt;
    }
    if (n.type != NodeType::file) return std::nullopt;
    const File& f = store_.files()[n.id];
    bool jpeg = f.kind == FileKind::jpeg;
    if (key == "scan_group") {
      if (!jpeg) return std::nullopt;
      return std::to_string(n.view ? n.view : policy_.effective(n.id));
    }
    if (key == "kind") return std::string(index::kind_name(f.kind));
    if (key == "format") {
      if (f.kind != FileKind::l3) return std::nullopt;
      return std::string(codec::view_format_name(codec::effective_view_format(shape_of(f), view_format_)));
    }
    if (key == "levels") return std::to_string(jpeg ? L_ : 1);
    if (key == "bytes") {
      std::string s;
      int top = jpeg ? L_ : 1;
      for (int k = 1; k <= top; ++k) {
        if (k > 1) s.push_back(',');
        s += std::to_string(file_size(f, k));
      }
      return s;
    }
    if (key == "record") return std::to_string(f.record);
    if (key == "position") return std::to_string(position_of(f));
    if (key == "source_size") return std::to_string(f.source_size);
    return std::nullopt;
  }

  // Storage order: files of earlier records, then the slot inside the record.
  uint64_t position_of(const File& f) const {
    std::call_once(record_start_once_, [this] {
      std::vector<uint64_t> count(store_.records().size() + 1, 0);
      for (const File& x : store_.files())
        if (x.record < store_.records().size()) ++count[x.record + 1];
      for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
      record_start_ = std::move(count);
    });
    return (f.record < record_start_.size() ? record_start_[f.record] : 0) + f.slot;
  }

  static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    std::string_view nm(name);
    std::string_view prefix(kXattrPrefix);
    if (n.type == NodeType::invalid) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (nm.substr(0, prefix.size()) != prefix) {
      fuse_reply_err(req, ENODATA);
      return;
    }
    auto v = fs.xattr_value(n, nm.substr(prefix.size()));
    if (!v) {
      fuse_reply_err(req, ENODATA);
      return;
    }
    reply_value(req, *v, size);
  }

  static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    std::string list;
    auto add = [&](std::string_view key) {
      list += kXattrPrefix;
      list += key;
      list.push_back('\0');
    };
    if (n.type == NodeType::dir) {
      add("scan_group");
      if (n.view == 0 && n.id == 0) add("order_seed");
    } else if (n.type == NodeType::file) {
      if (fs.store_.files()[n.id].kind == FileKind::jpeg) add("scan_group");
      for (auto k : kReadOnlyXattrs)
        if (k != "format" || fs.store_.files()[n.id].kind == FileKind::l3) add(k);
    } else if (n.type == NodeType::invalid) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    reply_value(req, list, size);
  }

  // After a level change the affected files have new inodes: drop the kernel's dentries that
  // still name the old ones, so the next path lookup asks us (an fd opened before keeps reading
  // its old, complete level). Invalidating an entry locks its parent directory, and while a
  // level change on a folder is being answered the kernel holds that folder's lock. So an entry
  // whose parent folder has a change in flight (this change's own folder, or another folder
  // changed at the same moment: a parent and a child changed together would otherwise each wait
  // for the other's lock forever) is invalidated by the background thread, which waits for that
  // change's reply; all others before this reply. A changed directory's own dentry goes first,
  // which already drops every unused dentry below it: only files open at that moment wait for
  // the background pass. At most half the worker threads invalidate at once (the rest answer
  // the lookups that hold directory locks shared); beyond that a change defers all its entries.
  //
  // Why this cannot deadlock: a worker only ever waits for a folder lock whose change was not
  // yet registered when it looked, i.e. registered after its own; that later change defers
  // every entry under earlier-registered folders, so waits only point from earlier changes to
  // later ones and never form a cycle.
  void invalidate_after_change(const Node& n) {
    if (!se_) return;
    std::vector<std::pair<uint32_t, std::string_view>> todo;  // (parent folder id, name), in order
    if (n.type == NodeType::file) {
      const File& f = store_.files()[n.id];
      todo.emplace_back(f.dir, store_.name(f));
    } else {
      const Dir& x = store_.dirs()[n.id];
      if (n.id != 0) todo.emplace_back(x.parent, store_.name(x));
      std::vector<uint32_t> stack;
      for (uint32_t i = 0; i < x.subdir_count; ++i) stack.push_back(store_.child_dirs()[x.subdir_begin + i]);
      while (!stack.empty()) {
        const uint32_t id = stack.back();
        const Dir& d = store_.dirs()[id];
        stack.pop_back();
        for (uint32_t i = 0; i < d.subdir_count; ++i) stack.push_back(store_.child_dirs()[d.subdir_begin + i]);
        for (uint32_t i = 0; i < d.file_count; ++i) {
          uint32_t f = store_.child_files()[d.file_begin + i];
          if (is_known(f)) todo.emplace_back(id, store_.name(store_.files()[f]));
        }
      }
      for (uint32_t i = 0; i < x.file_count; ++i) {
        uint32_t f = store_.child_files()[x.file_begin + i];
        if (is_known(f)) todo.emplace_back(n.id, store_.name(store_.files()[f]));
      }
    }
    const bool sync = sync_invalidators_.fetch_add(1) < settings_.threads / 2;
    std::vector<std::pair<uint64_t, std::vector<std::string>>> later;
    for (size_t i = 0; i < todo.size();) {
      const uint32_t dir = todo[i].first;
      const bool now = sync && !change_in_flight(dir);
      for (; i < todo.size() && todo[i].first == dir; ++i) {
        if (now) {
          inval_entry(inodes_.dir(dir), todo[i].second);
        } else {
          if (later.empty() || later.back().first != inodes_.dir(dir)) later.emplace_back(inodes_.dir(dir), std::vector<std::string>{});
          later.back().second.emplace_back(todo[i].second);
        }
      }
    }
    sync_invalidators_.fetch_sub(1);
    if (!later.empty()) {
      std::lock_guard lock(deferred_mu_);
      for (auto& job : later) deferred_.push_back(std::move(job));
      deferred_pending_ += later.size();
      deferred_cv_.notify_one();
    }
  }

  bool change_in_flight(uint32_t dir) {
    std::lock_guard lock(inflight_mu_);
    return inflight_dirs_.count(dir) != 0;
  }

  // Registers a level change on a live folder from the start of its request to its reply: the
  // kernel holds the folder's lock for exactly that long.
  class ChangeInFlight {
   public:
    ChangeInFlight(Filesystem& fs, const Node& n)
        : fs_(fs), dir_(n.type == NodeType::dir && n.view == 0 ? std::optional<uint32_t>(n.id) : std::nullopt) {
      if (!dir_) return;
      std::lock_guard lock(fs_.inflight_mu_);
      fs_.inflight_dirs_.insert(*dir_);
    }
    ~ChangeInFlight() {
      if (!dir_) return;
      std::lock_guard lock(fs_.inflight_mu_);
      fs_.inflight_dirs_.erase(fs_.inflight_dirs_.find(*dir_));
    }
    ChangeInFlight(const ChangeInFlight&) = delete;
    ChangeInFlight& operator=(const ChangeInFlight&) = delete;

   private:
    Filesystem& fs_;
    std::optional<uint32_t> dir_;
  };

  void inval_entry(uint64_t parent, std::string_view name) {
    int rc = fuse_lowlevel_notify_inval_entry(se_, parent, name.data(), name.size());
    invalidations_.fetch_add(1, std::memory_order_relaxed);
    if (rc != 0 && rc != -ENOENT) log_warn("invalidating entry '{}' failed: {}", name, std::strerror(-rc));
  }

  void deferred_invalidations() {
    std::unique_lock lock(deferred_mu_);
    while (!stopping_) {
      deferred_cv_.wait(lock, [&] { return stopping_ || !deferred_.empty(); });
      while (!deferred_.empty()) {
        auto [parent, names] = std::move(deferred_.front());
        deferred_.pop_front();
        lock.unlock();
        for (const auto& nm : names) inval_entry(parent, nm);
        lock.lock();
        --deferred_pending_;
      }
    }
  }

 public:
  void start_background() { deferred_thread_ = std::thread([this] { deferred_invalidations(); }); }
  void stop_background() {
    {
      std::lock_guard lock(deferred_mu_);
      stopping_ = true;
    }
    deferred_cv_.notify_all();
    if (deferred_thread_.joinable()) deferred_thread_.join();
  }

 private:
  int change_level(const Node& n, std::optional<int> level, int flags) {
    if (n.type != NodeType::dir && n.type != NodeType::file) return EPERM;
    if (n.view) return EPERM;  // views have a fixed level
    if (n.type == NodeType::file && store_.files()[n.id].kind != FileKind::jpeg) return EINVAL;
    std::optional<int> cur = n.type == NodeType::file ? policy_.file_override(n.id) : policy_.dir_override(n.id);
    if (level) {
      if ((flags & XATTR_CREATE) && cur) return EEXIST;
      if ((flags & XATTR_REPLACE) && !cur) return ENODATA;
    } else if (!cur) {
      return ENODATA;
    }
    bool ok = n.type == NodeType::file ? policy_.set_file(n.id, level) : policy_.set_dir(n.id, level);
    if (!ok) return level ? EINVAL : ENODATA;
    level_changes_.fetch_add(1, std::memory_order_relaxed);
    invalidate_after_change(n);
    log_info("{}{}: scan_group {}", n.type == NodeType::dir ? "directory " : "",
             n.type == NodeType::dir ? store_.relative_path(store_.dirs()[n.id]) : store_.relative_path(store_.files()[n.id]),
             level ? std::to_string(*level) : std::string("override removed"));
    return 0;
  }

  static int xattr_write_errno(std::string_view nm) {
    std::string_view prefix(kXattrPrefix);
    if (nm.substr(0, prefix.size()) == prefix) {
      auto key = nm.substr(prefix.size());
      for (auto k : kReadOnlyXattrs)
        if (key == k) return EPERM;  // read-only attribute
    }
    return EROFS;  // no other attribute can be stored on a read-only tree
  }

  // An xattr value as text: setfattr and shells may append a NUL or a newline.
  static std::string_view xattr_text(const char* value, size_t size) {
    std::string_view v(value, size);
    while (!v.empty() && (v.back() == '\0' || v.back() == '\n')) v.remove_suffix(1);
    return v;
  }

  // The order seed lives on the live root only.
  static bool is_order_seed(const Node& n, std::string_view name) {
    return name == kXattrOrderSeed && n.type == NodeType::dir && n.view == 0 && n.id == 0;
  }

  static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    if (n.type == NodeType::invalid) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (is_order_seed(n, name)) {
      std::string_view v = xattr_text(value, size);
      uint64_t seed = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
      if (v.empty() || ec != std::errc() || p != v.data() + v.size()) {
        fuse_reply_err(req, EINVAL);
        return;
      }
      if (flags & XATTR_CREATE) {
        fuse_reply_err(req, EEXIST);  // the seed always exists
        return;
      }
      fs.set_order_seed(seed);
      fuse_reply_err(req, 0);
      return;
    }
    if (std::string_view(name) != kXattrLevel) {
      fuse_reply_err(req, xattr_write_errno(name));
      return;
    }
    std::string_view v = xattr_text(value, size);
    auto lvl = config::parse_level(v);
    if (!lvl || (*lvl != config::kFull && *lvl > fs.L_)) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    int level = *lvl >= config::kFull ? fs.L_ : *lvl;
    ChangeInFlight in_flight(fs, n);  // until after the reply
    fuse_reply_err(req, fs.change_level(n, level, flags));
  }

  static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
    auto& fs = self(req);
    Node n = fs.inodes_.decode(ino);
    if (n.type == NodeType::invalid) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    if (is_order_seed(n, name)) {
      fs.set_order_seed(fs.settings_.order_seed.value_or(fs.store_.seed()));  // back to the configured seed
      fuse_reply_err(req, 0);
      return;
    }
    if (std::string_view(name) != kXattrLevel) {
      int e = xattr_write_errno(name);
      fuse_reply_err(req, e == EROFS ? ENODATA : e);
      return;
    }
    ChangeInFlight in_flight(fs, n);  // until after the reply
    fuse_reply_err(req, fs.change_level(n, std::nullopt, 0));
  }

  const index::Store& store_;
  const config::Settings settings_;
  const std::string mountpoint_;
  const int L_;
  InodeMap inodes_;
  LevelPolicy policy_;
  std::vector<std::atomic<uint64_t>> known_;
  fuse_session* se_ = nullptr;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  uint64_t store_bytes_ = 0;
  std::vector<std::string> level_names_ = [] {
    std::vector<std::string> v;
    for (int k = 1; k <= config::kMaxLevel; ++k) v.push_back(std::to_string(k));
    return v;
  }();

  // statistics
  std::atomic<uint64_t> lookups_{0}, reads_{0}, bytes_{0}, eio_{0}, level_changes_{0}, invalidations_{0};
  std::atomic<uint64_t> reads_by_kind_[3] = {0, 0, 0};
  std::vector<std::atomic<uint64_t>> reads_by_level_;
  // control-file snapshots
  mutable std::mutex snap_mu_;
  std::deque<std::pair<uint64_t, std::string>> snapshots_;
  uint64_t next_snapshot_ = 0;
  std::pair<uint64_t, std::optional<std::string>> latest_snapshot_[2];  // stats, config
  // entries inside changed directories, invalidated after the reply
  mutable std::mutex deferred_mu_;
  std::condition_variable deferred_cv_;
  std::deque<std::pair<uint64_t, std::vector<std::string>>> deferred_;
  size_t deferred_pending_ = 0;  // folders queued or being invalidated by the background thread
  bool stopping_ = false;
  std::thread deferred_thread_;
  // live folders whose level change is being answered (ChangeInFlight), and the workers
  // invalidating entries right now
  std::mutex inflight_mu_;
  std::unordered_multiset<uint32_t> inflight_dirs_;
  std::atomic<unsigned> sync_invalidators_{0};
  mutable std::mutex eio_mu_;
  std::unordered_set<uint32_t> eio_files_;
  OrderSlots order_slots_;
  OrderContents order_contents_;
  std::atomic<uint64_t> order_seed_;
  std::atomic<uint64_t> order_opens_{0};
  IoStats io_;
  std::unique_ptr<RecordReader> reader_;  // destroyed last: the cache and prefetcher use it
  std::unique_ptr<RecordCache> cache_;
  std::unique_ptr<Prefetcher> prefetch_;
  mutable std::once_flag record_start_once_;
  mutable std::vector<uint64_t> record_start_;
  const codec::ViewFormat view_format_;
  ViewCache views_;
  codec::L3BatchDecoder* l3_decoder_ = nullptr;  // the GPU, when the mount has one
  std::unique_ptr<L3Batcher> batcher_;
  std::atomic<uint64_t> gpu_failures_{0};
  std::unordered_map<uint32_t, std::string> display_names_;  // raw_names=ext only
  std::chrono::steady_clock::time_point started_;
};

const fuse_lowlevel_ops& Filesystem::ops() {
  static const fuse_lowlevel_ops o = [] {
    fuse_lowlevel_ops x{};
    x.init = op_init;
    x.lookup = op_lookup;
    x.forget = op_forget;
    x.forget_multi = op_forget_multi;
    x.getattr = op_getattr;
    x.setattr = op_setattr;
    x.readlink = op_readlink;
    x.mknod = op_mknod;
    x.mkdir = op_mkdir;
    x.unlink = op_unlink;
    x.rmdir = op_unlink;
    x.symlink = op_symlink;
    x.rename = op_rename;
    x.link = op_link;
    x.open = op_open;
    x.read = op_read;
    x.write = op_write;
    x.opendir = op_opendir;
    x.readdir = op_readdir;
    x.readdirplus = op_readdirplus;
    x.statfs = op_statfs;
    x.setxattr = op_setxattr;
    x.getxattr = op_getxattr;
    x.listxattr = op_listxattr;
    x.removexattr = op_removexattr;
    x.access = op_access;
    x.create = op_create;
    x.fallocate = op_fallocate;
    return x;
  }();
  return o;
}

// The kernel reads FUSE files in readahead-sized requests (128 KiB by default); raise the mount's
// readahead to 1 MiB (FUSE's largest request) so most files are one request. Needs root; best effort.
void set_readahead(dev_t dev) {
  std::string path = fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(dev), minor(dev));
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t w = ::write(fd, "1024", 4);
  (void)w;
  ::close(fd);
}

std::string escape_opt(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

int serve(const index::Store& store, const config::Settings& settings, const ServeRequest& req,
          const std::function<void(const std::string&)>& ready) {
  Filesystem fs(store, settings, req);
  std::vector<std::string> argv_s = {"fidelityfs"};
  if (req.debug) argv_s.push_back("-d");
  std::string o = "fsname=" + escape_opt("fidelityfs:" + store.path().string()) + ",subtype=fidelityfs";
  if (settings.allow_other) o += ",allow_other";
  argv_s.push_back("-o");
  argv_s.push_back(o);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &Filesystem::ops(), sizeof(fuse_lowlevel_ops), &fs);
  if (!se) {
    ready("cannot create the FUSE session (see messages above)");
    return 1;
  }
  fs.set_session(se);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    ready("cannot install signal handlers");
    return 1;
  }
  if (fuse_session_mount(se, req.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    ready(fmt::format("cannot mount at {} (is /dev/fuse available and the mount point an empty directory?)",
                      req.mountpoint));
    return 1;
  }
  // Ready once the kernel routes a stat of the mount point to this session (root inode 1).
  std::string mnt = req.mountpoint;
  std::thread probe([mnt, ready] {
    struct stat st {};
    if (::stat(mnt.c_str(), &st) == 0 && st.st_ino == 1) {
      set_readahead(st.st_dev);
      ready("");
    }
    else ready(fmt::format("{}: the new mount does not answer: {}", mnt, std::strerror(errno)));
  });
  fs.start_background();
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, settings.threads);
  fuse_loop_cfg_set_idle_threads(cfg, std::max(1u, settings.threads / 2));
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  probe.join();
  fs.stop_background();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  log_info("unmounted {}", req.mountpoint);
  return rc < 0 ? 1 : 0;  // > 0: ended by a signal (SIGTERM/SIGINT/SIGHUP), a clean unmount
}

}  // namespace fid::fs
