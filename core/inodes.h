// Inode numbers are arithmetic over the store's tables, so nothing is allocated per lookup and
// FORGET has nothing to do. Every inode's content is immutable: a file at another level is
// another inode, a new snapshot of a control file is another inode. That is what lets the
// kernel keep every page it has cached and skip OPEN/RELEASE entirely (no-open), yet a reader
// can never see bytes of two levels in one file.
//   1 .. D                         directories (ino = 1 + dir id; 1 is the root)
//   C = D+1 .. C+15                the control folder /.fidelity and its fixed entries
//   V = C+16 ..                    /.fidelity/sg/K/...: the whole tree at fixed level K (1..L):
//                                  ino = V + (K-1)*(D+F) + local, local = dir id | D + file id
//   LF = V + L*(D+F) ..            live files at level K: LF + (K-1)*F + file id; re-encoded
//                                  sequential (encoding=sequential): LF + (L+K-1)*F + file id
//   O = LF + 2*L*F ..                order files /.fidelity/order/epoch-N[.rank-R-of-W]: a bounded
//                                  table of kOrderSlots slots (core/orders.h), ino = O + slot
//   S = O + kOrderSlots ..         control-file snapshots: S + 2*generation + (0 stats | 1 config)
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace fid::core {

enum class NodeType : uint8_t { dir, file, ctl_root, ctl_stats, ctl_config, ctl_metrics, ctl_sg, ctl_order, order_file, invalid };

// The control files whose content is a snapshot (ControlFiles), and their index among them.
inline constexpr NodeType kSnapshotTypes[] = {NodeType::ctl_stats, NodeType::ctl_config, NodeType::ctl_metrics};
inline constexpr size_t snapshot_index(NodeType t) {
  return t == NodeType::ctl_config ? 1 : t == NodeType::ctl_metrics ? 2 : 0;
}
inline constexpr bool is_snapshot(NodeType t) {
  return t == NodeType::ctl_stats || t == NodeType::ctl_config || t == NodeType::ctl_metrics;
}

inline constexpr uint32_t kOrderSlots = 256;

struct Node {
  NodeType type = NodeType::invalid;
  uint32_t id = 0;      // dir id or file id (dir/file)
  int view = 0;         // 0 = live tree, K = /.fidelity/sg/K
  int level = 0;        // file: the level this inode serves (fixed for its lifetime)
  bool sequential = false;  // file: that level re-encoded as one sequential scan (live JPEGs only)
  uint64_t snapshot = 0;  // snapshot control files: the snapshot generation
};

inline bool is_dir_node(NodeType t) {
  return t == NodeType::dir || t == NodeType::ctl_root || t == NodeType::ctl_sg || t == NodeType::ctl_order;
}

class InodeMap {
 public:
  InodeMap(uint32_t ndirs, uint32_t nfiles, int levels)
      : d_(ndirs), f_(nfiles), levels_(levels), ctl_(uint64_t{ndirs} + 1), view_(ctl_ + 16),
        live_(view_ + uint64_t(levels) * (uint64_t{ndirs} + nfiles)), orders_(live_ + 2 * uint64_t(levels) * nfiles),
        snap_(orders_ + kOrderSlots) {}

  uint64_t dir(uint32_t id, int view = 0) const { return view == 0 ? 1 + uint64_t{id} : view_base(view) + id; }
  // A file in view K (its level is K).
  uint64_t view_file(uint32_t id, int view) const { return view_base(view) + d_ + id; }
  // A live file served at `level`, as stored or re-encoded sequential.
  uint64_t live_file(uint32_t id, int level, bool sequential = false) const {
    return live_ + uint64_t(level - 1 + (sequential ? levels_ : 0)) * f_ + id;
  }
  uint64_t ctl_root() const { return ctl_; }
  uint64_t ctl_sg() const { return ctl_ + 3; }
  uint64_t ctl_order() const { return ctl_ + 4; }
  uint64_t order_file(uint32_t slot) const { return orders_ + slot; }
  uint64_t ctl_snapshot(NodeType t, uint64_t generation) const {
    return snap_ + std::size(kSnapshotTypes) * generation + snapshot_index(t);
  }

  Node decode(uint64_t ino) const {
    Node n;
    if (ino == 0) return n;
    if (ino <= d_) {
      n.type = NodeType::dir;
      n.id = static_cast<uint32_t>(ino - 1);
      return n;
    }
    if (ino < view_) {
      if (ino == ctl_) n.type = NodeType::ctl_root;
      else if (ino == ctl_ + 3) n.type = NodeType::ctl_sg;
      else if (ino == ctl_ + 4) n.type = NodeType::ctl_order;
      return n;
    }
    if (ino < live_) {
      uint64_t stride = uint64_t{d_} + f_;
      uint64_t k = (ino - view_) / stride, local = (ino - view_) % stride;
      n.view = static_cast<int>(k) + 1;
      if (local < d_) {
        n.type = NodeType::dir;
        n.id = static_cast<uint32_t>(local);
      } else {
        n.type = NodeType::file;
        n.id = static_cast<uint32_t>(local - d_);
        n.level = n.view;
      }
      return n;
    }
    if (ino < orders_) {
      n.type = NodeType::file;
      const auto slot = static_cast<int>((ino - live_) / f_);
      n.sequential = slot >= levels_;
      n.level = slot % levels_ + 1;
      n.id = static_cast<uint32_t>((ino - live_) % f_);
      return n;
    }
    if (ino < snap_) {
      n.type = NodeType::order_file;
      n.id = static_cast<uint32_t>(ino - orders_);
      return n;
    }
    n.type = kSnapshotTypes[(ino - snap_) % std::size(kSnapshotTypes)];
    n.snapshot = (ino - snap_) / std::size(kSnapshotTypes);
    return n;
  }

 private:
  // View K's inode of local index 0 (its root directory).
  uint64_t view_base(int view) const { return view_ + uint64_t(view - 1) * (uint64_t{d_} + f_); }
  uint32_t d_, f_;
  int levels_;
  uint64_t ctl_, view_, live_, orders_, snap_;
};

}  // namespace fid::core
