#include "core/namespace.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace fid::core {

namespace {

constexpr std::string_view kViewExtensions[] = {".png", ".pgm", ".ppm", ".npy"};
constexpr std::string_view kControlNames[] = {"stats", "config", "metrics", "sg", "order"};

// "1".."kMaxLevel": the names of /.fidelity/sg's folders.
std::string_view level_name(int k) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int i = 1; i <= config::kMaxLevel; ++i) v.push_back(std::to_string(i));
    return v;
  }();
  return names[static_cast<size_t>(k - 1)];
}

void set_time(struct stat& st, int64_t ns) {
  st.st_mtim.tv_sec = ns / 1000000000;
  st.st_mtim.tv_nsec = ns % 1000000000;
  if (st.st_mtim.tv_nsec < 0) {
    st.st_mtim.tv_nsec += 1000000000;
    st.st_mtim.tv_sec -= 1;
  }
  st.st_atim = st.st_mtim;
  st.st_ctim = st.st_mtim;
}

}  // namespace

Namespace::Namespace(const index::Store& store, const InodeMap& inodes, const LevelPolicy& levels,
                     const LevelPolicy& encodings, FileReader& reader, ControlFiles& control, OrderFiles& orders,
                     const DisplayNames& display_names)
    : store_(store),
      inodes_(inodes),
      levels_(levels),
      encodings_(encodings),
      reader_(reader),
      control_(control),
      orders_(orders),
      display_names_(display_names),
      uid_(::getuid()),
      gid_(::getgid()),
      known_(std::make_unique<std::atomic<uint8_t>[]>(store.files().size())) {}

bool Namespace::name_cacheable(NodeType t) {
  return !is_snapshot(t) && t != NodeType::order_file;
}

uint64_t Namespace::live_file_ino(uint32_t f) const {
  const bool jpeg = store_.files()[f].kind == index::FileKind::jpeg;
  if (!jpeg) return inodes_.live_file(f, store_.levels());
  return inodes_.live_file(f, levels_.effective(f), encodings_.effective(f) == kSequential);
}

std::string_view Namespace::display_name(const index::File& f) const {
  if (display_names_.empty()) return store_.name(f);
  thread_local std::string scratch;  // a frame's name, used before this thread asks for another
  return display_names_.of(store_, f, scratch);
}

void Namespace::note_known(const Node& n) {
  if (n.type == NodeType::file && n.view == 0 && n.id < store_.files().size())
    known_[n.id].store(known_tag(n.level, n.sequential), std::memory_order_relaxed);
  order_with_lookups();  // before the lookup reads the level (see namespace.h)
}

bool Namespace::is_known(uint32_t f) const { return known_[f].load(std::memory_order_relaxed) != 0; }

bool Namespace::knows_live(uint32_t f) const {
  const uint8_t tag = known_[f].load(std::memory_order_relaxed);
  if (tag == 0) return false;
  const Node live = inodes_.decode(live_file_ino(f));
  return tag == known_tag(live.level, live.sequential);
}

// ---- listings ----------------------------------------------------------------------------------

std::optional<Namespace::DirEntry> Namespace::entry_at(uint64_t dir, size_t i) {
  const Node n = inodes_.decode(dir);
  if (i == 0) return DirEntry{".", dir, S_IFDIR};
  if (n.type == NodeType::dir) return tree_entry(n, i);
  return control_entry(n, i);
}

std::optional<Namespace::DirEntry> Namespace::tree_entry(const Node& n, size_t i) const {
  const index::Dir& d = store_.dirs()[n.id];
  if (i == 1) return DirEntry{"..", (n.view && n.id == 0) ? inodes_.ctl_sg() : inodes_.dir(d.parent, n.view), S_IFDIR};
  size_t k = i - 2;
  if (k < d.subdir_count) {
    const uint32_t c = store_.child_dirs()[d.subdir_begin + k];
    return DirEntry{store_.name(store_.dirs()[c]), inodes_.dir(c, n.view), S_IFDIR};
  }
  k -= d.subdir_count;
  if (k >= d.file_count) return std::nullopt;
  const uint32_t c = store_.child_files()[d.file_begin + k];
  return DirEntry{display_name(store_.files()[c]), n.view ? inodes_.view_file(c, n.view) : live_file_ino(c), S_IFREG};
}

std::optional<Namespace::DirEntry> Namespace::control_entry(const Node& n, size_t i) {
  if (n.type == NodeType::ctl_root) {
    if (i == 1) return DirEntry{"..", inodes_.dir(0), S_IFDIR};
    switch (i - 2) {
      case 0: return DirEntry{kControlNames[0], control_.snapshot_inode(NodeType::ctl_stats), S_IFREG};
      case 1: return DirEntry{kControlNames[1], control_.snapshot_inode(NodeType::ctl_config), S_IFREG};
      case 2: return DirEntry{kControlNames[2], control_.snapshot_inode(NodeType::ctl_metrics), S_IFREG};
      case 3: return DirEntry{kControlNames[3], inodes_.ctl_sg(), S_IFDIR};
      case 4: return DirEntry{kControlNames[4], inodes_.ctl_order(), S_IFDIR};
      default: return std::nullopt;
    }
  }
  if (i == 1) return DirEntry{"..", inodes_.ctl_root(), S_IFDIR};
  if (n.type == NodeType::ctl_sg && i - 2 < static_cast<size_t>(store_.levels())) {
    const int k = static_cast<int>(i - 2) + 1;
    return DirEntry{level_name(k), inodes_.dir(0, k), S_IFDIR};
  }
  return std::nullopt;  // order files are reachable by name, never listed
}

// ---- lookups -----------------------------------------------------------------------------------

std::optional<uint32_t> Namespace::find_file(const index::Dir& d, std::string_view name) const {
  auto files = store_.child_files().subspan(d.file_begin, d.file_count);
  auto stored = [&](std::string_view want) -> std::optional<uint32_t> {
    auto it = std::lower_bound(files.begin(), files.end(), want,
                               [&](uint32_t c, std::string_view v) { return store_.name(store_.files()[c]) < v; });
    if (it == files.end() || store_.name(store_.files()[*it]) != want) return std::nullopt;
    return *it;
  };
  if (auto f = stored(name); f && display_name(store_.files()[*f]).size() == name.size()) return f;
  if (display_names_.empty()) return std::nullopt;
  for (std::string_view ext : kViewExtensions) {  // raw_names=ext: "a.png.ppm" is L3 file "a.png"
    if (name.size() <= ext.size() || !name.ends_with(ext)) continue;
    if (auto f = stored(name.substr(0, name.size() - ext.size())); f && display_name(store_.files()[*f]) == name)
      return f;
  }
  return std::nullopt;
}

uint64_t Namespace::lookup_in_tree(const Node& n, std::string_view name) const {
  const index::Dir& d = store_.dirs()[n.id];
  if (n.view == 0 && n.id == 0 && name == ".fidelity") return inodes_.ctl_root();
  auto dirs = store_.child_dirs().subspan(d.subdir_begin, d.subdir_count);
  auto it = std::lower_bound(dirs.begin(), dirs.end(), name,
                             [&](uint32_t c, std::string_view v) { return store_.name(store_.dirs()[c]) < v; });
  if (it != dirs.end() && store_.name(store_.dirs()[*it]) == name) return inodes_.dir(*it, n.view);
  auto f = find_file(d, name);
  if (!f) return 0;
  return n.view ? inodes_.view_file(*f, n.view) : live_file_ino(*f);
}

uint64_t Namespace::lookup(const Node& n, std::string_view name, uint64_t* generation) {
  switch (n.type) {
    case NodeType::dir: return lookup_in_tree(n, name);
    case NodeType::ctl_root:
      if (name == "stats") return control_.snapshot_inode(NodeType::ctl_stats);
      if (name == "config") return control_.snapshot_inode(NodeType::ctl_config);
      if (name == "metrics") return control_.snapshot_inode(NodeType::ctl_metrics);
      if (name == "sg") return inodes_.ctl_sg();
      if (name == "order") return inodes_.ctl_order();
      return 0;
    case NodeType::ctl_order: {
      auto on = parse_order_name(name);
      return on ? inodes_.order_file(orders_.acquire(*on, generation)) : 0;
    }
    case NodeType::ctl_sg: {
      auto v = config::parse_level(name);
      if (v && *v != config::kFull && *v <= store_.levels() && name == level_name(*v)) return inodes_.dir(0, *v);
      return 0;
    }
    default: return 0;
  }
}

// ---- attributes --------------------------------------------------------------------------------

bool Namespace::stat_tree(const Node& n, struct stat& st) {
  if (n.type == NodeType::dir) {
    const index::Dir& d = store_.dirs()[n.id];
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2 + d.subdir_count + (n.view == 0 && n.id == 0 ? 1 : 0);  // the root also holds .fidelity
    st.st_size = 4096;
    set_time(st, d.mtime_ns);
    return true;
  }
  const index::File& f = store_.files()[n.id];
  st.st_mode = S_IFREG | 0444;
  st.st_nlink = 1;
  if (n.sequential) {
    Result<uint64_t> size = reader_.sequential_size(f, n.level);
    if (!size) return false;
    st.st_size = static_cast<off_t>(*size);
  } else {
    st.st_size = static_cast<off_t>(reader_.size(f, n.level));
  }
  st.st_blocks = (st.st_size + 511) / 512;
  set_time(st, f.mtime_ns);
  return true;
}

bool Namespace::stat_control(const Node& n, struct stat& st) {
  set_time(st, store_.dirs()[0].mtime_ns);
  if (is_dir_node(n.type)) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2 + (n.type == NodeType::ctl_root ? 2 : n.type == NodeType::ctl_sg ? static_cast<unsigned>(store_.levels()) : 0);
    st.st_size = 4096;
    return true;
  }
  ControlFiles::Text text = n.type == NodeType::order_file ? orders_.text(n.id) : control_.content(n);
  if (!text) return false;
  st.st_mode = S_IFREG | 0444;
  st.st_nlink = 1;
  st.st_size = static_cast<off_t>(text->size());
  return true;
}

bool Namespace::attributes(uint64_t ino, struct stat& st) {
  std::memset(&st, 0, sizeof st);
  const Node n = inodes_.decode(ino);
  st.st_ino = ino;
  st.st_uid = uid_;
  st.st_gid = gid_;
  st.st_blksize = 128 * 1024;
  switch (n.type) {
    case NodeType::invalid: return false;
    case NodeType::dir:
      if (n.id >= store_.dirs().size()) return false;
      return stat_tree(n, st);
    case NodeType::file:
      if (n.id >= store_.files().size()) return false;
      return stat_tree(n, st);
    default: return stat_control(n, st);
  }
}

Result<Namespace::Entry> Namespace::entry(const Node& parent, std::string_view name,
                                          const std::function<void(uint64_t ino)>& after_level_read) {
  Entry e;
  e.ino = lookup(parent, name, &e.generation);
  if (e.ino == 0) return e;
  if (!attributes(e.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", name)};
  const Node n = inodes_.decode(e.ino);
  e.name_cacheable = name_cacheable(n.type);
  if (after_level_read) after_level_read(e.ino);
  note_known(n);
  // The level again, now that the name is known: a change that set it after the first reading
  // either is seen here or sees the name known and invalidates it (after this reply, as the
  // kernel holds the folder's lock until then). Either way no old-level inode stays cached.
  if (n.type == NodeType::file && n.view == 0) {
    const uint64_t now = live_file_ino(n.id);
    if (now != e.ino) {
      e.ino = now;
      if (!attributes(e.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", name)};
    }
  }
  return e;
}

Result<Namespace::Entry> Namespace::listed_entry(const DirEntry& d) {
  Entry e;
  e.ino = d.ino;
  if (!attributes(d.ino, e.attr)) return Error{EIO, fmt::format("'{}' has no attributes", d.name)};
  const Node n = inodes_.decode(d.ino);
  e.name_cacheable = name_cacheable(n.type);
  if (d.name == "." || d.name == "..") return e;
  note_known(n);
  if (n.type == NodeType::file && n.view == 0) {  // the level again, as in entry()
    const uint64_t now = live_file_ino(n.id);
    if (now != e.ino && attributes(now, e.attr)) e.ino = now;
  }
  return e;
}

}  // namespace fid::core
