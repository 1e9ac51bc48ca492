#include "core/level_changes.h"

#include <sys/xattr.h>

#include <cerrno>

#include <fmt/format.h>

#include "common/log.h"

namespace fid::core {

namespace {
constexpr std::chrono::milliseconds kOwnEntryWait{200};
}  // namespace

LevelChanges::LevelChanges(const index::Store& store, const InodeMap& inodes, LevelPolicy& levels, LevelPolicy& encodings,
                           LevelPolicy& clip_reads, const Namespace& names, unsigned workers)
    : store_(store),
      inodes_(inodes),
      levels_(levels),
      encodings_(encodings),
      clip_reads_(clip_reads),
      names_(names),
      workers_(workers) {}

LevelChanges::~LevelChanges() { detach(); }

void LevelChanges::attach(KernelCache* kernel) {
  detach();
  kernel_.store(kernel);
  stopping_ = false;
  if (kernel) {
    thread_ = std::thread([this] { background(); });
    own_thread_ = std::thread([this] { own_entries(); });
  }
}

void LevelChanges::detach() {
  kernel_.store(nullptr);  // a change that counts itself in after this sees no kernel
  {
    std::unique_lock lock(inflight_mu_);
    inflight_cv_.wait(lock, [&] { return invalidating_ == 0; });
  }
  {
    std::lock_guard lock(deferred_mu_);
    stopping_ = true;
    // The mount is ending: what is still queued no longer matters.
    deferred_pending_ -= deferred_.size();
    deferred_.clear();
    own_pending_ -= own_.size();
    own_.clear();
  }
  deferred_cv_.notify_all();
  own_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (own_thread_.joinable()) own_thread_.join();
}

LevelChanges::InFlight::InFlight(LevelChanges& changes, const Node& n)
    : changes_(changes), dir_(n.type == NodeType::dir && n.view == 0 ? std::optional<uint32_t>(n.id) : std::nullopt) {
  if (!dir_) return;
  std::lock_guard lock(changes_.inflight_mu_);
  changes_.inflight_dirs_.insert(*dir_);
}

LevelChanges::InFlight::~InFlight() {
  if (!dir_) return;
  {
    std::lock_guard lock(changes_.inflight_mu_);
    changes_.inflight_dirs_.erase(changes_.inflight_dirs_.find(*dir_));
  }
  changes_.inflight_cv_.notify_all();
}

bool LevelChanges::in_flight(uint32_t dir) {
  std::lock_guard lock(inflight_mu_);
  return inflight_dirs_.count(dir) != 0;
}

bool LevelChanges::wait_not_in_flight(uint32_t dir, std::chrono::milliseconds limit) {
  std::unique_lock lock(inflight_mu_);
  return inflight_cv_.wait_for(lock, limit, [&] { return inflight_dirs_.count(dir) == 0; });
}

size_t LevelChanges::pending() const {
  std::lock_guard lock(deferred_mu_);
  return deferred_pending_ + own_pending_;
}

namespace {
// What a setting is called in errors, its attribute and a value as the log shows it.
struct SettingNames {
  const char* noun;       // "level"
  const char* plural;     // "levels"
  const char* attribute;  // "scan_group"
};
SettingNames names_of(SubtreeSetting what) {
  switch (what) {
    case SubtreeSetting::scan_group: return {"level", "levels", "scan_group"};
    case SubtreeSetting::encoding: return {"encoding", "an encoding", "encoding"};
    case SubtreeSetting::clip_reads: break;
  }
  return {"clip_reads setting", "a clip_reads setting", "clip_reads"};
}
std::string value_text(SubtreeSetting what, int value) {
  switch (what) {
    case SubtreeSetting::scan_group: return std::to_string(value);
    case SubtreeSetting::encoding: return std::string(config::encoding_name(encoding_of(value)));
    case SubtreeSetting::clip_reads: break;
  }
  return std::string(config::on_off_name(value == kClipReadsOn));
}
}  // namespace

Status LevelChanges::change(const Node& n, SubtreeSetting what, std::optional<int> value, int flags) {
  const SettingNames names = names_of(what);
  if ((n.type != NodeType::dir && n.type != NodeType::file) || n.view)
    return Error{EPERM, what == SubtreeSetting::scan_group
                            ? "only live files and folders take a level (views have a fixed one)"
                            : fmt::format("only live files and folders take {} (views read as stored)", names.plural)};
  const bool file = n.type == NodeType::file;
  if (file && store_.files()[n.id].kind != index::FileKind::jpeg)
    return Error{EINVAL, what == SubtreeSetting::scan_group ? std::string("only JPEG files have levels")
                                                            : fmt::format("only JPEG files have {}", names.plural)};
  LevelPolicy& policy = what == SubtreeSetting::scan_group ? levels_
                        : what == SubtreeSetting::encoding ? encodings_
                                                           : clip_reads_;
  const char* const name = names.noun;
  const std::optional<int> cur = file ? policy.file_override(n.id) : policy.dir_override(n.id);
  if (value && (flags & XATTR_CREATE) && cur) return Error{EEXIST, fmt::format("the {} is already set", name)};
  if (value && (flags & XATTR_REPLACE) && !cur) return Error{ENODATA, fmt::format("no {} is set", name)};
  if (!value && !cur) return Error{ENODATA, fmt::format("no {} is set", name)};
  if (!(file ? policy.set_file(n.id, value) : policy.set_dir(n.id, value)))
    return value ? Error{EINVAL, fmt::format("bad {}", name)} : Error{ENODATA, fmt::format("no {} is set", name)};
  changes_.fetch_add(1, std::memory_order_relaxed);
  // A level or an encoding chooses the inode a name leads to: the kernel forgets the old ones.
  if (what != SubtreeSetting::clip_reads) {
    names_.order_with_lookups();  // before reading is_known (see Namespace::order_with_lookups)
    {
      std::lock_guard lock(inflight_mu_);
      ++invalidating_;
    }
    if (kernel_.load()) invalidate(plan(n), file, file || n.id != 0);
    {
      std::lock_guard lock(inflight_mu_);
      --invalidating_;
    }
    inflight_cv_.notify_all();
  }
  log_info("{}{}: {} {}", file ? "" : "directory ",
           file ? store_.relative_path(store_.files()[n.id]) : store_.relative_path(store_.dirs()[n.id]),
           names.attribute, value ? value_text(what, *value) : std::string("override removed"));
  return {};
}

// The names to invalidate after a change of n: a file's own name; a folder's own name first,
// then the names the kernel knows of every file below it, folder by folder.
LevelChanges::Plan LevelChanges::plan(const Node& n) const {
  Plan todo;
  if (n.type == NodeType::file) {
    const index::File& f = store_.files()[n.id];
    todo.emplace_back(f.dir, store_.name(f));
    return todo;
  }
  auto known_files = [&](uint32_t id) {
    const index::Dir& d = store_.dirs()[id];
    for (uint32_t i = 0; i < d.file_count; ++i) {
      const uint32_t f = store_.child_files()[d.file_begin + i];
      if (names_.is_known(f)) todo.emplace_back(id, store_.name(store_.files()[f]));
    }
  };
  const index::Dir& x = store_.dirs()[n.id];
  if (n.id != 0) todo.emplace_back(x.parent, store_.name(x));
  std::vector<uint32_t> stack(store_.child_dirs().begin() + x.subdir_begin,
                              store_.child_dirs().begin() + x.subdir_begin + x.subdir_count);
  while (!stack.empty()) {
    const uint32_t id = stack.back();
    stack.pop_back();
    const index::Dir& d = store_.dirs()[id];
    for (uint32_t i = 0; i < d.subdir_count; ++i) stack.push_back(store_.child_dirs()[d.subdir_begin + i]);
    known_files(id);
  }
  known_files(n.id);
  return todo;
}

void LevelChanges::invalidate(const Plan& todo, bool file_change, bool own) {
  // A file's change holds no folder lock of its own: when its folder's change is still in flight
  // (usually just answered: the InFlight ends right after the reply), wait for it briefly and
  // invalidate before this reply, so the caller's next stat sees the new level; defer only if it
  // takes longer. Waiting holds nothing that the folder's change needs.
  if (file_change && !todo.empty()) (void)wait_not_in_flight(todo.front().first, std::chrono::milliseconds(1000));
  const bool sync = sync_invalidators_.fetch_add(1) < workers_.load() / 2;
  std::vector<std::pair<uint64_t, std::vector<std::string>>> later;
  for (size_t i = 0; i < todo.size();) {
    const uint32_t dir = todo[i].first;
    const bool now = sync && !in_flight(dir);
    if (!now) later.emplace_back(inodes_.dir(dir), std::vector<std::string>{});
    for (; i < todo.size() && todo[i].first == dir; ++i) {
      if (!now) later.back().second.emplace_back(todo[i].second);
      else if (i == 0 && own) forget_own_entry(inodes_.dir(dir), todo[i].second);
      else forget_entry(inodes_.dir(dir), todo[i].second);
    }
  }
  sync_invalidators_.fetch_sub(1);
  log_debug("a level change invalidates {} name(s) the kernel knows; {} folder(s) of them left to the invalidation thread",
            todo.size(), later.size());
  if (later.empty()) return;
  std::lock_guard lock(deferred_mu_);
  deferred_pending_ += later.size();
  for (auto& job : later) deferred_.push_back(std::move(job));
  deferred_cv_.notify_one();
}

void LevelChanges::forget_entry(uint64_t parent, std::string_view name) {
  KernelCache* kernel = kernel_.load();
  if (!kernel) return;  // detached meanwhile
  const Status s = kernel->forget_entry(parent, name);
  invalidations_.fetch_add(1, std::memory_order_relaxed);
  if (!s && s.error().code != ENOENT) log_warn("{}", s.error().message);
}

void LevelChanges::forget_own_entry(uint64_t parent, std::string_view name) {
  auto job = std::make_shared<OwnEntry>(OwnEntry{parent, std::string(name)});
  std::unique_lock lock(deferred_mu_);
  own_.push_back(job);
  ++own_pending_;
  own_cv_.notify_all();
  (void)own_cv_.wait_for(lock, kOwnEntryWait, [&] { return job->done || stopping_; });
}

void LevelChanges::own_entries() {
  std::unique_lock lock(deferred_mu_);
  for (;;) {
    own_cv_.wait(lock, [&] { return stopping_ || !own_.empty(); });
    if (stopping_) return;
    std::shared_ptr<OwnEntry> job = std::move(own_.front());
    own_.pop_front();
    lock.unlock();
    forget_entry(job->parent, job->name);
    lock.lock();
    job->done = true;
    --own_pending_;
    own_cv_.notify_all();
    idle_cv_.notify_all();
  }
}

void LevelChanges::background() {
  std::unique_lock lock(deferred_mu_);
  for (;;) {
    deferred_cv_.wait(lock, [&] { return stopping_ || !deferred_.empty(); });
    if (stopping_) return;
    auto [parent, names] = std::move(deferred_.front());
    deferred_.pop_front();
    lock.unlock();
    for (const auto& nm : names) {
      if (stopping_.load()) break;
      forget_entry(parent, nm);
    }
    lock.lock();
    --deferred_pending_;
    idle_cv_.notify_all();
  }
}

void LevelChanges::wait_idle() {
  std::unique_lock lock(deferred_mu_);
  idle_cv_.wait(lock, [&] { return (deferred_pending_ == 0 && own_pending_ == 0) || stopping_; });
}

}  // namespace fid::core
