#include "sources/tar_source.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fmt/format.h>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/fd.h"
#include "common/posix_io.h"
#include "sources/tar_archive.h"

namespace fid::sources {

namespace fsys = std::filesystem;

namespace {

constexpr uint64_t kNoOffset = UINT64_MAX;  // a member inside a compressed stream

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string join(const std::string& prefix, const std::string& path) {
  return prefix.empty() ? path : path.empty() ? prefix : prefix + "/" + path;
}

int64_t mtime_ns(archive_entry* e) {
  return static_cast<int64_t>(archive_entry_mtime(e)) * 1'000'000'000 + archive_entry_mtime_nsec(e);
}

// ---------------------------------------------------------------------------------------------
// The walk

// A member of the tars as the walk meets it.
struct TarMember {
  enum Kind : uint8_t { file, dir, skipped, link } kind = file;
  std::string path;     // normalized, inner tars' folders included
  std::string detail;   // skipped: the reason; link: the target's path
  uint32_t tar = 0;     // index into the tar list
  uint64_t offset = 0;  // of the data in the tar file, or kNoOffset
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t seq = 0;  // file: its place in the stream of the tars' files
};

// A member as the listing keeps it, until the tree is built: TarMember's fixed part (packed: 33
// bytes), in a PathListing whose extra is the detail.
struct [[gnu::packed]] MemberInfo {
  uint64_t offset, size;
  int64_t mtime_ns;
  uint32_t tar, seq;
  TarMember::Kind kind;
};
using MemberListing = PathListing<MemberInfo>;

// The walk over one tar, shared by listing and by the streamed read so that both number the
// files alike: `on_member` sees every member, and may read a file's data from the archive.
class TarWalk {
 public:
  using OnMember = std::function<fid::Status(const TarMember&, archive* a)>;

  TarWalk(const TarSourceOptions& opt, const std::atomic<bool>* cancel, OnMember on_member)
      : opt_(opt), cancel_(cancel), on_member_(std::move(on_member)) {}

  // Walks tar `t`. `compressed` becomes true once a filter (decompression) is met: then no
  // member has an offset.
  fid::Status walk(uint32_t t, bool& compressed) {
    Fd fd(::open(opt_.tars[t].c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
      const int err = errno;
      return fid::Error{err, fmt::format("{}: {}", name(t), std::strerror(err))};
    }
    RangeInput in(fd.get(), 0, static_cast<uint64_t>(st.st_size));
    fid::Result<ArchivePtr> a = open_range(in, name(t));
    if (!a) return std::move(a).error();
    return walk_archive(t, a->get(), "", &in, compressed);
  }

 private:
  std::string name(uint32_t t) const { return opt_.tars[t].string(); }

  // `range` is the input while the archive's members can be read at random, else null.
  fid::Status walk_archive(uint32_t t, archive* a, const std::string& prefix, RangeInput* range, bool& compressed) {
    archive_entry* e = nullptr;
    std::string last;
    while (true) {
      if (cancel_ && *cancel_) return fid::Error{ECANCELED, "interrupted"};
      const int r = archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) return {};
      if (r < ARCHIVE_WARN)
        return archive_error(a, last.empty() ? name(t) : fmt::format("{}: after member '{}'", name(t), last));
      if (archive_filter_code(a, 0) != ARCHIVE_FILTER_NONE) compressed = true;
      if (compressed) range = nullptr;
      fid::Result<TarMember> m = classify(t, a, e, prefix, range);
      if (!m) return std::move(m).error();
      last = m->path;
      if (m->kind == TarMember::file && opt_.expand_inner_tars && ends_with(m->path, ".tar")) {
        if (fid::Status inner = walk_inner(t, a, *m, range, compressed); !inner) return inner;
        continue;
      }
      if (m->kind == TarMember::file) m->seq = seq_++;
      if (fid::Status seen = on_member_(*m, a); !seen) return seen;
    }
  }

  // An inner tar: a folder named after it (".tar" dropped) holding its members.
  fid::Status walk_inner(uint32_t t, archive* a, const TarMember& m, RangeInput* range, bool& compressed) {
    TarMember folder = m;
    folder.kind = TarMember::dir;
    folder.path = m.path.substr(0, m.path.size() - 4);
    if (fid::Status seen = on_member_(folder, a); !seen) return seen;
    const std::string where = fmt::format("{}: member '{}'", name(t), m.path);
    if (range) {
      RangeInput in(range->fd(), m.offset, m.offset + m.size);
      fid::Result<ArchivePtr> inner = open_range(in, where);
      if (!inner) return std::move(inner).error();
      bool inner_compressed = false;  // a compressed inner tar is streamed; the outer stays at random
      return walk_archive(t, inner->get(), folder.path, &in, inner_compressed);
    }
    MemberInput in{a};
    fid::Result<ArchivePtr> inner = open_member(in, where);
    if (!inner) return std::move(inner).error();
    return walk_archive(t, inner->get(), folder.path, nullptr, compressed);
  }

  fid::Result<TarMember> classify(uint32_t t, archive* a, archive_entry* e, const std::string& prefix,
                                  RangeInput* range) {
    const char* raw = archive_entry_pathname(e);
    const std::string raw_name = raw ? raw : "";
    fid::Result<std::string> path = normalize_source_path(raw_name);
    if (!path) return fid::Error{EINVAL, fmt::format("{}: member '{}': {}", name(t), raw_name, path.error().message)};
    TarMember m;
    m.tar = t;
    m.path = join(prefix, *path);
    m.mtime_ns = mtime_ns(e);
    m.size = archive_entry_size_is_set(e) ? static_cast<uint64_t>(archive_entry_size(e)) : 0;
    m.offset = range ? range->begin() + static_cast<uint64_t>(archive_filter_bytes(a, 0)) : kNoOffset;
    if (range && archive_entry_filetype(e) == AE_IFREG && m.offset + m.size > range->end())
      return fid::Error{EIO, fmt::format("{}: member '{}': truncated (the tar ends inside its data)", name(t), m.path)};
    if (const char* target = archive_entry_hardlink(e)) {
      fid::Result<std::string> to = normalize_source_path(target);
      if (!to) return fid::Error{EINVAL, fmt::format("{}: member '{}': hard link to '{}': {}", name(t), m.path, target,
                                                     to.error().message)};
      m.kind = TarMember::link;
      m.detail = join(prefix, *to);
      return m;
    }
    switch (archive_entry_filetype(e)) {
      case AE_IFDIR:
        m.kind = TarMember::dir;
        break;
      case AE_IFREG:
        if (archive_entry_sparse_count(e) > 0) skip(m, "a sparse member (not supported)");
        break;
      case AE_IFLNK:
        skip(m, "a symbolic link (links in a tar are not followed)");
        break;
      default:
        return fid::Error{EINVAL, fmt::format("{}: member '{}': a device file, FIFO or socket cannot be packed",
                                              name(t), m.path)};
    }
    return m;
  }

  static void skip(TarMember& m, std::string why) {
    m.kind = TarMember::skipped;
    m.detail = std::move(why);
  }

  const TarSourceOptions& opt_;
  const std::atomic<bool>* cancel_;
  OnMember on_member_;
  uint32_t seq_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct TarSource::Impl {
  struct Location {
    uint64_t offset = 0, size = 0;
    int64_t mtime_ns = 0;
    uint32_t tar = 0, seq = 0;
  };

  TarSourceOptions opt;
  const std::atomic<bool>* cancel = nullptr;
  std::vector<Location> files;  // by file index of the listed tree
  bool streamed = false;
  std::vector<Fd> fds;  // read at random: each tar, opened once

  // Streamed: a producer thread walks the tars again and hands the wanted files' bytes over in
  // stream order; read() waits for its file's turn.
  struct Streamed {
    uint32_t seq;
    fid::Result<SourceBytes> bytes;
  };
  std::vector<bool> wanted;  // by seq
  std::vector<bool> only;    // by file index: the files pack reads (empty: all)
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Streamed> queue;
  std::optional<fid::Error> stream_error;
  bool stream_started = false, stopping = false;
  std::thread producer;

  explicit Impl(TarSourceOptions o) : opt(std::move(o)) {}
  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (producer.joinable()) producer.join();
  }

  fid::Result<SourceTree> list();
  fid::Result<SourceBytes> read_at(uint32_t i) const;
  fid::Result<SourceBytes> read_streamed(uint32_t i);
  void produce();
};

namespace {

// Builds the tree from the members sorted in walk order (SourceTreeBuilder), with what only a
// tar has: hard links, and the tar that holds each member (errors name it).
class TreeBuilder {
 public:
  TreeBuilder(const TarSourceOptions& opt, const std::vector<int64_t>& tar_mtime, bool streamed)
      : opt_(opt), tar_mtime_(tar_mtime), streamed_(streamed), tree_(tar_mtime.empty() ? 0 : tar_mtime[0]) {}

  // Finds every hard link's target, before the sorted listing is drained (a link may name a
  // member anywhere in it).
  fid::Status resolve_links(const MemberListing& sorted) {
    if (streamed_) return {};  // links are skipped: their data came earlier in the stream
    for (size_t k = 0; k < sorted.size(); ++k) {
      const auto [m, path, target] = sorted[k];
      if (m.kind != TarMember::link) continue;
      const size_t found = sorted.lower_bound(target);
      const MemberListing::Entry t = found < sorted.size() ? sorted[found] : MemberListing::Entry{};
      if (found == sorted.size() || t.path != target || t.info.kind != TarMember::file || t.info.tar != m.tar)
        return fid::Error{ENOENT, fmt::format("{}: member '{}': hard link to a missing member '{}'",
                                              opt_.tars[m.tar].string(), path, target)};
      link_targets_.emplace(std::string(path), TarSource::Impl::Location{t.info.offset, t.info.size, m.mtime_ns, m.tar,
                                                                          t.info.seq});
    }
    return {};
  }

  // The next member in walk order.
  fid::Status add(const MemberListing::Entry& e, std::vector<TarSource::Impl::Location>& files) {
    const auto& [m, path_view, detail] = e;
    const std::string path(path_view);
    if (any_ && path == last_path_ && !(m.kind == TarMember::dir && last_kind_ == TarMember::dir))
      return fid::Error{EEXIST, fmt::format("duplicate path '{}' (in {} and {})", path, opt_.tars[last_tar_].string(),
                                            opt_.tars[m.tar].string())};
    any_ = true;
    last_path_ = path;
    last_kind_ = m.kind;
    last_tar_ = m.tar;
    const int64_t made = tar_mtime_[m.tar];
    fid::Status added;
    if (m.kind == TarMember::dir) {
      added = tree_.add_dir(path, m.mtime_ns, made);
    } else if (m.kind == TarMember::skipped) {
      added = tree_.add_skipped(path, std::string(detail), made);
    } else if (m.kind == TarMember::link && streamed_) {  // its data came earlier in the stream
      added = tree_.add_skipped(path, "a hard link in a compressed tar (not supported)", made);
    } else {
      const TarSource::Impl::Location loc = m.kind == TarMember::link
                                                ? link_targets_.at(path)
                                                : TarSource::Impl::Location{m.offset, m.size, m.mtime_ns, m.tar, m.seq};
      fid::Result<bool> in_tree = tree_.add_file(path, loc.size, made);
      if (in_tree && *in_tree) files.push_back(loc);
      if (!in_tree) added = std::move(in_tree).error();
    }
    if (!added) return fid::Error{added.error().code, fmt::format("{}: member '{}': {}", opt_.tars[m.tar].string(), path,
                                                                  added.error().message)};
    return {};
  }

  SourceTree take() { return tree_.take(); }

 private:
  const TarSourceOptions& opt_;
  const std::vector<int64_t>& tar_mtime_;
  const bool streamed_;
  SourceTreeBuilder tree_;
  std::unordered_map<std::string, TarSource::Impl::Location> link_targets_;  // by the link's path
  std::string last_path_;
  TarMember::Kind last_kind_ = TarMember::dir;
  uint32_t last_tar_ = 0;
  bool any_ = false;
};

}  // namespace

fid::Result<SourceTree> TarSource::Impl::list() {
  MemberListing members;
  std::vector<std::pair<std::string, std::string>> too_long;  // path, why
  std::vector<int64_t> tar_mtime;
  TarWalk walk(opt, cancel, [&](const TarMember& m, archive*) -> fid::Status {
    fid::Status added = members.add(MemberInfo{m.offset, m.size, m.mtime_ns, m.tar, m.seq, m.kind}, m.path, m.detail);
    if (!added && added.error().code == ENAMETOOLONG) too_long.emplace_back(m.path, added.error().message);
    else if (!added) return fid::Error{added.error().code, fmt::format("{}: cannot list: {}", opt.tars[m.tar].string(), added.error().message)};
    return {};
  });
  for (uint32_t t = 0; t < opt.tars.size(); ++t) {
    struct stat st {};
    tar_mtime.push_back(::stat(opt.tars[t].c_str(), &st) == 0
                            ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec
                            : 0);
    bool compressed = false;
    if (fid::Status walked = walk.walk(t, compressed); !walked) return std::move(walked).error();
  }
  members.sort();
  for (size_t k = 0; k < members.size() && !streamed; ++k) {
    const MemberInfo m = members[k].info;
    streamed = m.kind == TarMember::file && m.offset == kNoOffset;
  }
  TreeBuilder builder(opt, tar_mtime, streamed);
  if (fid::Status linked = builder.resolve_links(members); !linked) return std::move(linked).error();
  files.reserve(members.size());  // pages are touched only as files are added: no growth copies
  fid::Status built = members.drain([&](const MemberListing::Entry& e) { return builder.add(e, files); });
  if (!built) return std::move(built).error();
  if (!streamed) {
    for (const fsys::path& p : opt.tars) {
      fds.emplace_back(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
      if (fds.back().get() < 0) return fid::Error{errno, fmt::format("{}: {}", p.string(), std::strerror(errno))};
    }
  }
  SourceTree tree = builder.take();
  for (auto& skipped : too_long) tree.skipped.push_back(std::move(skipped));
  return tree;
}

fid::Result<SourceBytes> TarSource::Impl::read_at(uint32_t i) const {
  const Location& loc = files[i];
  SourceBytes out;
  out.mtime_ns = loc.mtime_ns;
  out.bytes.resize(static_cast<size_t>(loc.size));
  fid::Result<uint64_t> n = fid::pread_loop(fds[loc.tar].get(), out.bytes.data(), out.bytes.size(), loc.offset, "read failed");
  if (!n) return std::move(n).error();
  if (*n != out.bytes.size()) return fid::Error{EIO, "the tar ends inside the member's data (truncated since listed)"};
  return out;
}

void TarSource::Impl::produce() {
  TarWalk walk(opt, cancel, [&](const TarMember& m, archive* a) -> fid::Status {
    if (m.kind != TarMember::file || m.seq >= wanted.size() || !wanted[m.seq]) return {};
    Streamed item{m.seq, SourceBytes{}};
    item.bytes->mtime_ns = m.mtime_ns;
    if (fid::Status read = read_member(a, m.size, item.bytes->bytes); !read) item.bytes = std::move(read).error();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return stopping || queue.size() < 2; });
    if (stopping) return fid::Error{ECANCELED, "interrupted"};
    queue.push_back(std::move(item));
    cv.notify_all();
    return {};
  });
  fid::Status walked;
  for (uint32_t t = 0; t < opt.tars.size() && walked; ++t) {
    bool compressed = false;
    walked = walk.walk(t, compressed);
  }
  std::lock_guard lock(mu);
  stream_error = walked ? fid::Error{EIO, "the tars changed since they were listed"} : walked.error();
  cv.notify_all();
}

fid::Result<SourceBytes> TarSource::Impl::read_streamed(uint32_t i) {
  const uint32_t seq = files[i].seq;
  std::unique_lock lock(mu);
  if (!stream_started) {
    stream_started = true;
    wanted.assign(files.empty() ? 0 : std::max_element(files.begin(), files.end(), [](auto& a, auto& b) {
                                        return a.seq < b.seq;
                                      })->seq + 1,
                  false);
    for (size_t f = 0; f < files.size(); ++f)
      if (only.empty() || only[f]) wanted[files[f].seq] = true;
    producer = std::thread([this] { produce(); });
  }
  cv.wait(lock, [&] { return (!queue.empty() && queue.front().seq == seq) || (queue.empty() && stream_error); });
  if (queue.empty()) return *stream_error;
  fid::Result<SourceBytes> out = std::move(queue.front().bytes);
  queue.pop_front();
  cv.notify_all();
  return out;
}

TarSource::TarSource(TarSourceOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TarSource::~TarSource() = default;

fid::Result<SourceTree> TarSource::list(const std::atomic<bool>& cancel) {
  impl_->cancel = &cancel;
  return impl_->list();
}

fid::Result<SourceBytes> TarSource::read(const SourceTree&, uint32_t i) const {
  return impl_->streamed ? impl_->read_streamed(i) : impl_->read_at(i);
}

std::optional<std::vector<uint32_t>> TarSource::stream_order() const {
  if (!impl_->streamed) return std::nullopt;
  std::vector<uint32_t> order(impl_->files.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return impl_->files[a].seq < impl_->files[b].seq; });
  return order;
}

void TarSource::read_only(std::vector<bool> files) { impl_->only = std::move(files); }

bool is_tar_name(const fsys::path& path) {
  const std::string n = path.filename().string();
  for (const char* tail : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz", ".txz", ".tar.bz2", ".tbz2"})
    if (ends_with(n, tail)) return true;
  return false;
}

}  // namespace fid::sources
