#include "sources/pack_source.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace fid::sources {

bool walk_less(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const auto ca = a[i] == '/' ? 0 : static_cast<unsigned char>(a[i]) + 1;
    const auto cb = b[i] == '/' ? 0 : static_cast<unsigned char>(b[i]) + 1;
    return ca < cb;
  }
  return a.size() < b.size();
}

void ChunkedPool::Unmap::operator()(char* p) const { ::munmap(p, kMaxEntryBytes); }

char* ChunkedPool::map_chunk() {
  void* m = ::mmap(nullptr, kMaxEntryBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
}

namespace {

fid::Error no_chunk(int err) {
  return fid::Error{err, fmt::format("out of memory for the listing (mmap: {})", std::strerror(err))};
}

}  // namespace

fid::Result<uint64_t> ChunkedPool::add(std::initializer_list<std::string_view> parts) {
  size_t need = 0;
  for (std::string_view p : parts) need += p.size();
  if (chunks_.empty() || used_ + need > kMaxEntryBytes) {
    char* chunk = map_chunk();
    if (!chunk) return no_chunk(errno);
    chunks_.emplace_back(chunk);
    used_ = 0;
  }
  const uint64_t handle = (static_cast<uint64_t>(chunks_.size() - 1) << kChunkBits) | used_;
  for (std::string_view p : parts) {
    if (p.empty()) continue;  // an empty view's data() may be null
    std::memcpy(chunks_.back().get() + used_, p.data(), p.size());
    used_ += p.size();
  }
  return handle;
}

fid::Status SourceFiles::add(uint32_t dir, std::string_view name, uint32_t size) {
  char head[10];
  std::memcpy(head, &dir, 4);
  std::memcpy(head + 4, &size, 4);
  const auto len = static_cast<uint16_t>(name.size());
  std::memcpy(head + 8, &len, 2);
  fid::Result<uint64_t> handle = pool_.add({std::string_view(head, 10), name});
  if (!handle) return std::move(handle).error();
  entry_.push_back(*handle);
  return {};
}

fid::Result<std::string> normalize_source_path(std::string_view raw) {
  if (!raw.empty() && raw.front() == '/') return fid::Error{EINVAL, "absolute path"};
  if (raw.find('\0') != std::string_view::npos) return fid::Error{EINVAL, "a NUL byte in the path"};
  std::string out;
  size_t i = 0;
  while (i <= raw.size()) {
    size_t j = raw.find('/', i);
    if (j == std::string_view::npos) j = raw.size();
    std::string_view seg = raw.substr(i, j - i);
    if (seg == "..") return fid::Error{EINVAL, "'..' in the path"};
    if (!seg.empty() && seg != ".") {
      if (!out.empty()) out += '/';
      out += seg;
    }
    i = j + 1;
  }
  return out;
}

namespace {
constexpr size_t kMaxNameBytes = 255;  // NAME_MAX: what a mount can show
}

SourceTreeBuilder::SourceTreeBuilder(int64_t root_mtime_ns) {
  tree_.dirs.push_back(SourceDir{0, "", "", root_mtime_ns});
  stack_.push_back(0);
}

fid::Result<bool> SourceTreeBuilder::admit(const std::string& path, bool is_dir) {
  if (any_ && path == last_path_ && !(is_dir && last_was_dir_))
    return fid::Error{EEXIST, fmt::format("duplicate path '{}'", path)};
  any_ = true;
  last_path_ = path;
  last_was_dir_ = is_dir;
  if (path.empty()) return false;
  if (path == ".fidelity" || path.starts_with(".fidelity/")) {
    if (!reserved_reported_) tree_.skipped.emplace_back(".fidelity", "name reserved for the mount's control folder");
    reserved_reported_ = true;
    return false;
  }
  return true;
}

fid::Status SourceTreeBuilder::enter(const std::string& dir, int64_t made_mtime_ns) {
  auto is_within = [&](uint32_t id) {
    const std::string& rel = tree_.dirs[id].rel;
    return rel.empty() || dir == rel || dir.starts_with(rel + "/");
  };
  while (!is_within(stack_.back())) stack_.pop_back();
  while (tree_.dirs[stack_.back()].rel != dir) {
    const std::string& top = tree_.dirs[stack_.back()].rel;
    const size_t from = top.empty() ? 0 : top.size() + 1;
    const size_t end = dir.find('/', from);
    const std::string rel = dir.substr(0, end);
    if (rel == last_file_) return fid::Error{EEXIST, fmt::format("path '{}' is both a file and a folder", rel)};
    const auto id = static_cast<uint32_t>(tree_.dirs.size());
    tree_.dirs.push_back(SourceDir{stack_.back(), rel.substr(from), rel, made_mtime_ns});
    stack_.push_back(id);
  }
  return {};
}

namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The first segment of `path` longer than a name may be, or npos.
size_t long_name_at(const std::string& path) {
  for (size_t i = 0; i <= path.size();) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j - i > kMaxNameBytes) return i;
    i = j + 1;
  }
  return std::string::npos;
}

}  // namespace

fid::Status SourceTreeBuilder::add_dir(const std::string& path, int64_t mtime_ns, int64_t made_mtime_ns) {
  fid::Result<bool> admitted = admit(path, true);
  if (!admitted) return std::move(admitted).error();
  if (path.empty()) tree_.dirs[0].mtime_ns = mtime_ns;
  if (!*admitted) return {};
  if (long_name_at(path) != std::string::npos) {
    tree_.skipped.emplace_back(path + "/", fmt::format("a name longer than {} bytes", kMaxNameBytes));
    return {};
  }
  if (fid::Status made = enter(path, made_mtime_ns); !made) return made;
  tree_.dirs[stack_.back()].mtime_ns = mtime_ns;
  return {};
}

fid::Result<bool> SourceTreeBuilder::add_file(const std::string& path, uint64_t size, int64_t made_mtime_ns) {
  fid::Result<bool> admitted = admit(path, false);
  if (!admitted || !*admitted) return admitted;
  if (long_name_at(path) != std::string::npos) {
    tree_.skipped.emplace_back(path, fmt::format("a name longer than {} bytes", kMaxNameBytes));
    return false;
  }
  const std::string parent = parent_of(path);
  if (fid::Status made = enter(parent, made_mtime_ns); !made) return std::move(made).error();
  if (size > kMaxSourceFileBytes) {
    tree_.skipped.emplace_back(path, "larger than 4 GiB");
    return false;
  }
  if (fid::Status added = tree_.files.add(stack_.back(), std::string_view(path).substr(parent.empty() ? 0 : parent.size() + 1),
                                          static_cast<uint32_t>(size));
      !added)
    return std::move(added).error();
  last_file_ = path;
  tree_.bytes += size;
  return true;
}

fid::Status SourceTreeBuilder::add_skipped(const std::string& path, std::string why, int64_t made_mtime_ns) {
  fid::Result<bool> admitted = admit(path, false);
  if (!admitted) return std::move(admitted).error();
  if (!*admitted) return {};
  if (long_name_at(path) == std::string::npos)
    if (fid::Status made = enter(parent_of(path), made_mtime_ns); !made) return made;
  tree_.skipped.emplace_back(path, std::move(why));
  return {};
}

}  // namespace fid::sources
