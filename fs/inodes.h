// Inode numbers are arithmetic over the store's tables, so nothing is allocated per lookup and
// FORGET has nothing to do:
//   1 .. D                  directories (ino = 1 + dir id; 1 is the root)
//   D+1 .. D+F              files (ino = 1 + D + file id)
//   C = D+F+1 ..            the control folder /.fidelity and its fixed entries
//   V = C+16 ..             views /.fidelity/sg/K/...: the whole tree at fixed level K (1..L),
//                           ino = V + (K-1)*(D+F) + (live ino - 1); sg/K itself is the view's root.
//   O = V + L*(D+F) ..      order files /.fidelity/order/epoch-N[.rank-R-of-W]: a bounded table of
//                           kOrderSlots slots (fs/orders.h), ino = O + slot.
#pragma once

#include <cstdint>

namespace fid::fs {

enum class NodeType : uint8_t { dir, file, ctl_root, ctl_stats, ctl_config, ctl_sg, ctl_order, order_file, invalid };

inline constexpr uint32_t kOrderSlots = 256;

struct Node {
  NodeType type = NodeType::invalid;
  uint32_t id = 0;  // dir id or file id (dir/file)
  int view = 0;     // 0 = live tree, K = /.fidelity/sg/K
};

inline bool is_dir_node(NodeType t) {
  return t == NodeType::dir || t == NodeType::ctl_root || t == NodeType::ctl_sg || t == NodeType::ctl_order;
}

class InodeMap {
 public:
  InodeMap(uint32_t ndirs, uint32_t nfiles, int levels)
      : d_(ndirs), f_(nfiles), levels_(levels), ctl_(uint64_t{ndirs} + nfiles + 1), view_(ctl_ + 16) {}

  uint64_t dir(uint32_t id, int view = 0) const { return base(view) + 1 + id; }
  uint64_t file(uint32_t id, int view = 0) const { return base(view) + 1 + d_ + id; }
  uint64_t ctl_root() const { return ctl_; }
  uint64_t ctl_stats() const { return ctl_ + 1; }
  uint64_t ctl_config() const { return ctl_ + 2; }
  uint64_t ctl_sg() const { return ctl_ + 3; }
  uint64_t ctl_order() const { return ctl_ + 4; }
  uint64_t order_file(uint32_t slot) const { return orders_() + slot; }
  uint64_t max_ino() const { return orders_() + kOrderSlots - 1; }

  Node decode(uint64_t ino) const {
    Node n;
    if (ino == 0) return n;
    int view = 0;
    uint64_t local = ino;
    if (ino >= orders_()) {
      if (ino - orders_() >= kOrderSlots) return n;
      n.type = NodeType::order_file;
      n.id = static_cast<uint32_t>(ino - orders_());
      return n;
    }
    if (ino >= view_) {
      uint64_t stride = uint64_t{d_} + f_;
      if (stride == 0) return n;
      uint64_t k = (ino - view_) / stride;
      if (k >= static_cast<uint64_t>(levels_)) return n;
      view = static_cast<int>(k) + 1;
      local = (ino - view_) % stride + 1;
    } else if (ino >= ctl_) {
      switch (ino - ctl_) {
        case 0: n.type = NodeType::ctl_root; return n;
        case 1: n.type = NodeType::ctl_stats; return n;
        case 2: n.type = NodeType::ctl_config; return n;
        case 3: n.type = NodeType::ctl_sg; return n;
        case 4: n.type = NodeType::ctl_order; return n;
        default: return n;
      }
    }
    n.view = view;
    if (local <= d_) {
      n.type = NodeType::dir;
      n.id = static_cast<uint32_t>(local - 1);
    } else {
      n.type = NodeType::file;
      n.id = static_cast<uint32_t>(local - 1 - d_);
    }
    return n;
  }

  uint32_t ndirs() const { return d_; }
  uint32_t nfiles() const { return f_; }
  int levels() const { return levels_; }

 private:
  // ino = base + local, local = 1 + dir id or 1 + D + file id.
  uint64_t orders_() const { return view_ + uint64_t(levels_) * (uint64_t{d_} + f_); }
  uint64_t base(int view) const { return view == 0 ? 0 : view_ + uint64_t(view - 1) * (uint64_t{d_} + f_) - 1; }
  uint32_t d_, f_;
  int levels_;
  uint64_t ctl_, view_;
};

}  // namespace fid::fs
