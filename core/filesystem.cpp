#include "core/filesystem.h"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"

namespace fid::core {

Filesystem::Filesystem(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
                       const Options& options)
    : store_(store),
      settings_(settings),
      options_(options),
      inodes_(static_cast<uint32_t>(store.dirs().size()), static_cast<uint32_t>(store.files().size()), store.levels()),
      policy_(make_level_policy(store, settings)),
      encodings_(make_encoding_policy(store, settings)),
      clip_reads_(make_clip_reads_policy(store, settings)),
      display_names_(make_display_names(store, settings)),
      reader_(store, source, settings, options.gpu, &clip_reads_, options.video),
      orders_(store, settings.order_seed.value_or(store.seed()), settings.order_window, rank_deal(settings.order_ranks),
              &display_names_),
      random_reads_(store, source, settings_, policy_, reader_),
      telemetry_({store, source, settings_, reader_, policy_, changes_, change_access_, orders_, random_reads_,
                  request_errors_, pushes_, listings_, options.mountpoint}),
      control_(inodes_, telemetry_),
      names_(store, inodes_, policy_, encodings_, reader_, control_, orders_, display_names_),
      pushes_(store, inodes_, names_, reader_, settings_),
      listings_(store, settings_),
      changes_(store, inodes_, policy_, encodings_, clip_reads_, names_, settings.threads),
      xattrs_(store, policy_, encodings_, clip_reads_, reader_, orders_, changes_, random_reads_),
      change_access_(settings.level_changes, options.owner, options.level_change_group) {
  for (const auto& r : store.records()) store_bytes_ += r.size;
  source.cancel_on(&stopping_);
  log_info("records: {}", source.describe());
}

void Filesystem::detach() {
  stopping_.store(true);  // reads on the wire end now: a shutdown never waits for a server
  pushes_.detach();
  listings_.detach();
  changes_.detach();
}

std::string Filesystem::describe() const {
  return fmt::format("mounted {} at {} ({} files, {} dirs, {} levels, {} layout, default level {})",
                     store_.location(), options_.mountpoint, store_.files().size(), store_.dirs().size(),
                     store_.levels(), index::layout_name(store_.layout()), policy_.mount_default());
}

void Filesystem::received(Request op, uint64_t ino) {
  const NodeType t = inodes_.decode(ino).type;
  if (t == NodeType::dir || t == NodeType::file) request_errors_.received(op);
}

Result<Node> Filesystem::existing(uint64_t ino) const {
  const Node n = inodes_.decode(ino);
  if (n.type == NodeType::invalid) return Error{ENOENT, "no such inode"};
  return n;
}

// ---- names and attributes ----------------------------------------------------------------------

Result<Filesystem::Entry> Filesystem::lookup(uint64_t parent, std::string_view name) {
  const Node pn = inodes_.decode(parent);
  if (pn.type == NodeType::dir) telemetry_.count_lookup();
  if (!is_dir_node(pn.type)) return pn.type == NodeType::invalid ? Error{ENOENT, "no such folder"} : Error{ENOTDIR, "not a folder"};
  return names_.entry(pn, name, options_.after_level_read_for_tests);
}

Result<struct stat> Filesystem::getattr(uint64_t ino) {
  struct stat st;
  if (!names_.attributes(ino, st)) return Error{ENOENT, "no such inode"};
  return st;
}

Status Filesystem::access(uint64_t ino, int mask) {
  if (auto n = existing(ino); !n.ok()) return n.error();
  if (mask & W_OK) return Error{EROFS, "read-only file system"};
  return {};
}

Result<Filesystem::OpenMode> Filesystem::open(uint64_t ino, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) return Error{EROFS, "read-only file system"};
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  if (is_dir_node(n->type)) return Error{EISDIR, "a folder"};
  OpenMode mode;
  mode.answered = large_views_direct_.load();
  if (mode.answered && n->type == NodeType::file && n->id < store_.files().size() &&
      store_.files()[n->id].kind == index::FileKind::l3) {
    struct stat st {};
    mode.direct_io = names_.attributes(ino, st) && static_cast<uint64_t>(st.st_size) > kDirectViewBytes;
  }
  return mode;
}

Status Filesystem::opendir(uint64_t ino, int flags) {
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  if (!is_dir_node(n->type)) return Error{ENOTDIR, "not a folder"};
  if ((flags & O_ACCMODE) != O_RDONLY) return Error{EROFS, "read-only file system"};
  return {};
}

Result<std::optional<Namespace::DirEntry>> Filesystem::entry_at(uint64_t dir, size_t i) {
  if (!is_dir_node(inodes_.decode(dir).type)) return Error{ENOTDIR, "not a folder"};
  return names_.entry_at(dir, i);
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

Result<FileReader::Bytes> Filesystem::read(uint64_t ino, uint64_t offset, uint64_t size, bool page_cache) {
  const Node n = inodes_.decode(ino);
  if (is_snapshot(n.type) || n.type == NodeType::order_file) return read_control(n, offset, size);
  if (n.type != NodeType::file || n.id >= store_.files().size())
    return n.type == NodeType::invalid || n.type == NodeType::file ? Error{ENOENT, "no such file"} : Error{EISDIR, "a folder"};
  const auto start = std::chrono::steady_clock::now();
  const index::File& f = store_.files()[n.id];
  pushes_.before_read(n, offset, page_cache);  // a clip's next frames made known while this one is read
  auto r = reader_.read(f, n.level, n.sequential, offset, size);
  telemetry_.count_read(f.kind, n.level, r.ok() ? r->size() : 0, std::chrono::steady_clock::now() - start);
  if (r.ok()) pushes_.on_read(n, offset, page_cache);  // its clip's next frames, pushed while this one is answered
  return r;
}

Result<FileReader::Bytes> Filesystem::read_control(const Node& n, uint64_t offset, uint64_t size) {
  ControlFiles::Text text;
  if (n.type == NodeType::order_file) {
    text = orders_.text(n.id);
    if (!text) return Error{ENOENT, "the order file's slot was reused"};
    if (offset == 0) {  // a reader took an order: the prefetcher follows it from now on
      orders_.note_open();
      if (auto order = orders_.params(n.id)) {
        reader_.follow(*order);
        if (order->world > 1) random_reads_.note_rank_order(*order);
      }
    }
  } else {
    text = control_.content(n);
  }
  const size_t begin = std::min<uint64_t>(offset, text->size());
  const size_t len = std::min<uint64_t>(size, text->size() - begin);
  telemetry_.count_control_read(len);
  return FileReader::Bytes{{reinterpret_cast<const uint8_t*>(text->data()) + begin, len}, text, {}};
}

// ---- attributes --------------------------------------------------------------------------------

Result<std::string> Filesystem::getxattr(uint64_t ino, std::string_view name) {
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  return xattrs_.get(*n, name);
}

Result<std::string> Filesystem::listxattr(uint64_t ino) {
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  return xattrs_.list(*n);
}

Status Filesystem::setxattr(uint64_t ino, std::string_view name, std::string_view value, int flags,
                            const Caller& caller) {
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  if (Xattrs::is_ours(name))
    if (Status allowed = change_access_.check(caller); !allowed.ok()) return allowed;
  return xattrs_.set(*n, name, value, flags);
}

Status Filesystem::removexattr(uint64_t ino, std::string_view name, const Caller& caller) {
  auto n = existing(ino);
  if (!n.ok()) return n.error();
  if (Xattrs::is_ours(name))
    if (Status allowed = change_access_.check(caller); !allowed.ok()) return allowed;
  return xattrs_.remove(*n, name);
}

}  // namespace fid::core
