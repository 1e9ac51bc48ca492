#include "core/xattrs.h"

#include "common/log.h"

#include <fmt/format.h>

#include <sys/xattr.h>

#include <charconv>

namespace fid::core {

namespace {

constexpr std::string_view kPrefix = "user.fidelity.";
constexpr std::string_view kFileFacts[] = {"kind", "levels", "bytes", "record", "position", "source_size", "format"};
// On a clip folder made from a video (index::VideoSource).
constexpr std::string_view kVideoFacts[] = {"source", "source_size", "codec", "frame_rate", "frame_size", "frames"};
// On a video kept as its stream (pack --video-streams), besides those.
constexpr std::string_view kStreamFacts[] = {"stream_codec", "gop", "stored_size", "stored_bytes"};

// The key after "user.fidelity.", or nullopt for any other attribute.
std::optional<std::string_view> key_of(std::string_view name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  return name.substr(kPrefix.size());
}

bool is_read_only(std::string_view name) {
  auto key = key_of(name);
  if (!key) return false;
  for (auto k : kFileFacts)
    if (*key == k) return true;
  for (auto k : kVideoFacts)
    if (*key == k) return true;
  for (auto k : kStreamFacts)
    if (*key == k) return true;
  return false;
}

// The order seed lives on the live root only.
bool is_order_seed(const Node& n, std::string_view name) {
  return key_of(name) == "order_seed" && n.type == NodeType::dir && n.view == 0 && n.id == 0;
}

// An attribute value as text: setfattr and shells may append a NUL or a newline.
std::string_view value_text(std::string_view v) {
  while (!v.empty() && (v.back() == '\0' || v.back() == '\n')) v.remove_suffix(1);
  return v;
}

Error no_data() { return Error{ENODATA, "no such attribute"}; }

// Why a user.fidelity.* name other than scan_group and the root's order_seed cannot be set or
// removed: a typo of a writable name says what it is called.
Error not_writable(std::string_view name) {
  const std::string_view key = *key_of(name);
  if (is_read_only(name)) return Error{EPERM, "read-only attribute"};
  if (key == "order_seed") return Error{EINVAL, "user.fidelity.order_seed is on the mount's root only"};
  return Error{ENOTSUP, "no such attribute: a level is user.fidelity.scan_group, an encoding "
                        "user.fidelity.encoding, clip reads user.fidelity.clip_reads, the order seed "
                        "user.fidelity.order_seed (on the mount's root)"};
}

std::string encoding_text(int value) {
  return std::string(config::encoding_name(encoding_of(value)));
}

std::string clip_reads_text(int value) { return std::string(config::on_off_name(value == kClipReadsOn)); }

}  // namespace

bool Xattrs::is_ours(std::string_view name) { return key_of(name).has_value(); }

Xattrs::Xattrs(const index::Store& store, const LevelPolicy& levels, const LevelPolicy& encodings,
               const LevelPolicy& clip_reads, const FileReader& reader, OrderFiles& orders, LevelChanges& changes,
               RandomReads& random_reads)
    : store_(store),
      levels_(levels),
      encodings_(encodings),
      clip_reads_(clip_reads),
      reader_(reader),
      orders_(orders),
      changes_(changes),
      random_reads_(random_reads) {}

std::optional<std::string> Xattrs::file_value(const index::File& f, int view, std::string_view key) const {
  const bool jpeg = f.kind == index::FileKind::jpeg;
  if (key == "scan_group") return jpeg ? std::optional(std::to_string(view ? view : levels_.effective(f.id))) : std::nullopt;
  if (key == "encoding") {
    if (!jpeg) return std::nullopt;
    return encoding_text(view ? kProgressive : encodings_.effective(f.id));
  }
  if (key == "clip_reads") return jpeg ? std::optional(clip_reads_text(clip_reads_.effective(f.id))) : std::nullopt;
  if (key == "kind") return std::string(index::kind_name(f.kind));
  if (key == "format") {
    if (f.kind != index::FileKind::l3) return std::nullopt;
    return std::string(codec::view_format_name(codec::effective_view_format(FileReader::shape_of(f), reader_.view_format())));
  }
  if (key == "levels") return std::to_string(jpeg ? store_.levels() : 1);
  if (key == "bytes") {
    std::string s;
    for (int k = 1; k <= (jpeg ? store_.levels() : 1); ++k) {
      if (k > 1) s.push_back(',');
      s += std::to_string(reader_.size(f, k));
    }
    return s;
  }
  if (key == "record") return std::to_string(f.record);
  if (key == "position") return std::to_string(store_.storage_position(f));
  if (key == "source_size") return std::to_string(f.source_size);
  return std::nullopt;
}

std::optional<std::string> Xattrs::video_value(uint32_t dir, std::string_view key) const {
  const index::VideoSource* v = store_.video_of(dir);
  if (!v) return std::nullopt;
  if (key == "source") return v->name;
  if (key == "source_size") return std::to_string(v->source_size);
  if (key == "codec") return v->codec;
  if (key == "frame_rate") return fmt::format("{}/{}", v->fps_num, v->fps_den);
  if (key == "frame_size") return fmt::format("{}x{}", v->width, v->height);
  if (key == "frames") return std::to_string(v->frames);
  if (!v->is_stream()) return std::nullopt;
  if (key == "stream_codec") return v->stream.codec;
  if (key == "gop") return v->stream.gop ? std::to_string(v->stream.gop) : std::string("source");
  if (key == "stored_size") return fmt::format("{}x{}", v->stream.width, v->stream.height);
  if (key == "stored_bytes") return std::to_string(v->stream.stored_bytes);
  return std::nullopt;
}

Result<std::string> Xattrs::get(const Node& n, std::string_view name) const {
  auto key = key_of(name);
  if (!key) return no_data();
  std::optional<std::string> v;
  if (n.type == NodeType::dir) {
    if (*key == "scan_group") v = std::to_string(n.view ? n.view : levels_.dir_effective(n.id));
    else if (*key == "encoding") v = encoding_text(n.view ? kProgressive : encodings_.dir_effective(n.id));
    else if (*key == "clip_reads") v = clip_reads_text(clip_reads_.dir_effective(n.id));
    else if (is_order_seed(n, name)) v = std::to_string(orders_.seed());
    else v = video_value(n.id, *key);
  } else if (n.type == NodeType::file) {
    v = file_value(store_.files()[n.id], n.view, *key);
  }
  if (!v) return no_data();
  return std::move(*v);
}

std::string Xattrs::list(const Node& n) const {
  std::string out;
  auto add = [&](std::string_view key) {
    out.append(kPrefix).append(key).push_back('\0');
  };
  if (n.type == NodeType::dir) {
    add("scan_group");
    add("encoding");
    add("clip_reads");
    if (n.view == 0 && n.id == 0) add("order_seed");
    if (const index::VideoSource* v = store_.video_of(n.id)) {
      for (auto k : kVideoFacts) add(k);
      if (v->is_stream())
        for (auto k : kStreamFacts) add(k);
    }
  } else if (n.type == NodeType::file) {
    const index::FileKind kind = store_.files()[n.id].kind;
    if (kind == index::FileKind::jpeg) {
      add("scan_group");
      add("encoding");
      add("clip_reads");
    }
    for (auto k : kFileFacts)
      if (k != "format" || kind == index::FileKind::l3) add(k);
  }
  return out;
}

Status Xattrs::set_seed(std::string_view value, int flags) {
  std::string_view v = value_text(value);
  uint64_t seed = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) return Error{EINVAL, "the order seed is a number"};
  if (flags & XATTR_CREATE) return Error{EEXIST, "the order seed always exists"};
  if (orders_.set_seed(seed)) seed_changed();
  return {};
}

// Order names are never cached by the kernel (entry timeout 0): the next lookup of a name gets
// the new seed's order in a slot of its own, while inodes looked up before keep their orders.
void Xattrs::seed_changed() {
  log_info("order seed {}", orders_.seed());
  random_reads_.forget_share();
}

// A change someone asked for that failed (a bad value, an unknown fidelity attribute) is logged
// at info where it is answered: they want to know why. A refusal (EPERM), a write of any other
// attribute (EROFS, like every write) and EIO keep their errno's level.
Status Xattrs::answered(Status st) {
  if (st.ok()) return st;
  Error e = std::move(st).error();
  if (!e.log_level && e.code != EPERM && e.code != EROFS && e.code != EIO) e.log_level = LogLevel::info;
  return e;
}

Status Xattrs::set(const Node& n, std::string_view name, std::string_view value, int flags) {
  return answered(change(n, name, value, flags));
}

Status Xattrs::remove(const Node& n, std::string_view name) { return answered(remove_change(n, name)); }

Status Xattrs::change(const Node& n, std::string_view name, std::string_view value, int flags) {
  if (is_order_seed(n, name)) return set_seed(value, flags);
  if (!key_of(name)) return Error{EROFS, "a read-only file system: only user.fidelity.* attributes are set"};
  if (key_of(name) == "encoding") {
    const std::optional<config::Encoding> e = config::parse_encoding(value_text(value));
    if (!e) return Error{EINVAL, "an encoding is progressive or sequential"};
    return changes_.change(n, SubtreeSetting::encoding, *e == config::Encoding::sequential ? kSequential : kProgressive,
                           flags);
  }
  if (key_of(name) == "clip_reads") {
    const std::optional<bool> on = config::parse_on_off(value_text(value));
    if (!on) return Error{EINVAL, "clip_reads is on or off"};
    return changes_.change(n, SubtreeSetting::clip_reads, *on ? kClipReadsOn : kClipReadsOff, flags);
  }
  if (key_of(name) != "scan_group") return not_writable(name);
  auto level = config::parse_level(value_text(value));
  if (!level || (*level != config::kFull && *level > store_.levels())) return Error{EINVAL, "not a level of this store"};
  return level_changed(changes_.change(n, SubtreeSetting::scan_group, *level >= config::kFull ? store_.levels() : *level, flags));
}

Status Xattrs::level_changed(Status st) {
  if (st.ok()) random_reads_.decide();  // the prefixes the mount needs changed with the level
  return st;
}

Status Xattrs::remove_change(const Node& n, std::string_view name) {
  if (is_order_seed(n, name)) {
    if (orders_.reset_seed()) seed_changed();
    return {};
  }
  if (!key_of(name)) return no_data();
  if (key_of(name) == "encoding") return changes_.change(n, SubtreeSetting::encoding, std::nullopt, 0);
  if (key_of(name) == "clip_reads") return changes_.change(n, SubtreeSetting::clip_reads, std::nullopt, 0);
  if (key_of(name) != "scan_group") return not_writable(name);
  return level_changed(changes_.change(n, SubtreeSetting::scan_group, std::nullopt, 0));
}

}  // namespace fid::core
