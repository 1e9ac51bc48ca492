// libFuzzer target: what anyone who can reach a mount may write to it, through core::Filesystem as
// the FUSE adapter calls it: extended attribute names and values (levels, the order seed) set and
// removed on the root, a folder and a file, and names looked up (and read) under
// /.fidelity/order and /.fidelity/sg. Each input gets a value or an errno, never a crash or a
// hang, and a level that was set reads back. Needs a store, $FIDELITYFS_FUZZ_STORE
// (scripts/test.sh packs one); without it every input is ignored.
#include <sys/xattr.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"
#include "core/filesystem.h"
#include "index/store.h"
#include "storage/local_record_source.h"

namespace {

struct Mount {
  std::unique_ptr<fid::index::Store> store;
  std::unique_ptr<fid::storage::LocalRecordSource> source;
  std::unique_ptr<fid::core::Filesystem> fs;
  uint64_t dir = 0, file = 0, order = 0, sg = 0;
};

uint64_t first_child(fid::core::Filesystem& fs, uint64_t dir, bool want_dir) {
  for (size_t i = 2;; ++i) {  // after . and ..
    auto e = fs.entry_at(dir, i);
    if (!e.ok() || !*e) return 0;
    if (((*e)->type == S_IFDIR) == want_dir && (*e)->name != ".fidelity") {
      auto found = fs.lookup(dir, std::string((*e)->name));
      return found.ok() ? found->ino : 0;
    }
  }
}

Mount* open_mount() {
  const char* dir = std::getenv("FIDELITYFS_FUZZ_STORE");
  if (!dir || !*dir) return nullptr;
  auto store = fid::index::Store::open(dir);
  if (!store.ok()) std::abort();  // the store scripts/test.sh packed must open
  auto* m = new Mount;
  m->store = std::move(store).value();
  m->source = std::make_unique<fid::storage::LocalRecordSource>(*m->store);
  fid::config::Settings settings;
  m->fs = std::make_unique<fid::core::Filesystem>(*m->store, *m->source, settings,
                                                  fid::core::Filesystem::Options{"/fuzz", nullptr, 0, {}, {}});
  m->dir = first_child(*m->fs, 1, true);
  m->file = m->dir ? first_child(*m->fs, m->dir, false) : 0;
  auto ctl = m->fs->lookup(1, ".fidelity");
  if (ctl.ok()) {
    if (auto o = m->fs->lookup(ctl->ino, "order"); o.ok()) m->order = o->ino;
    if (auto s = m->fs->lookup(ctl->ino, "sg"); s.ok()) m->sg = s->ino;
  }
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Mount* m = open_mount();
  if (!m || size == 0) return 0;
  fid::core::Filesystem& fs = *m->fs;
  const fid::core::Caller root{0, 0, {}};
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint64_t nodes[] = {1, m->dir, m->file};
  const uint64_t node = nodes[data[0] % 3];
  switch ((data[0] / 3) % 5) {
    case 0: {  // a level
      if (!node) break;
      const int flags = (data[0] / 15) % 3 == 1 ? XATTR_CREATE : (data[0] / 15) % 3 == 2 ? XATTR_REPLACE : 0;
      if (fs.setxattr(node, "user.fidelity.scan_group", text, flags, root).ok()) {
        if (!fs.getxattr(node, "user.fidelity.scan_group").ok()) std::abort();  // what was set reads back
        if (!fs.removexattr(node, "user.fidelity.scan_group", root).ok()) std::abort();
      }
      break;
    }
    case 1:  // the order seed
      if (fs.setxattr(1, "user.fidelity.order_seed", text, 0, root).ok())
        (void)fs.removexattr(1, "user.fidelity.order_seed", root);
      break;
    case 2:  // any attribute name
      if (node) {
        (void)fs.getxattr(node, text);
        if (fs.setxattr(node, text, "1", 0, root).ok()) (void)fs.removexattr(node, text, root);
      }
      break;
    case 3:  // an order file's name
      if (m->order) {
        auto e = fs.lookup(m->order, text);
        if (e.ok() && e->ino) (void)fs.read(e->ino, 0, 4096);
      }
      break;
    case 4:  // a view's name
      if (m->sg) (void)fs.lookup(m->sg, text);
      break;
  }
  return 0;
}
