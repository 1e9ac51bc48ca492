// A kernel for the core's tests of clip pushes (core/clip_pushes.h), without a mount: it records
// the stores, looks names up and lists folders through a core::Filesystem as the kernel would
// through the mount, and knows which inodes it holds.
#pragma once

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/filesystem.h"

namespace fid::testutil {

class StoringKernel final : public core::KernelCache {
 public:
  Status forget_entry(uint64_t, std::string_view) override { return {}; }
  void forget_inode(uint64_t) override {}
  Status store(uint64_t ino, std::span<const uint8_t> data, std::span<const uint8_t> tail) override {
    std::lock_guard lock(mu_);
    ++calls;
    if (refuse) return Error{refuse, "refused"};
    if (strict && !inodes.count(ino)) return Error{ENOENT, "no such inode"};  // as the kernel answers
    std::vector<uint8_t>& bytes = stored[ino];
    bytes.assign(data.begin(), data.end());
    bytes.insert(bytes.end(), tail.begin(), tail.end());
    return {};
  }
  // As the kernel does: each name of the path looked up (its reply sent), unless `through` is null.
  Status make_known(std::span<const std::string> paths, const std::function<void(size_t)>& found) override {
    if (through == nullptr) return {};
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string& path = paths[i];
      uint64_t ino = 1;
      for (size_t at = 0; at <= path.size();) {
        const size_t end = std::min(path.find('/', at), path.size());
        auto e = through->lookup(ino, path.substr(at, end - at));
        if (!e.ok() || e->ino == 0) return Error{ENOENT, path};
        through->lookup_replied(e->ino);
        ino = e->ino;
        std::lock_guard lock(mu_);
        inodes.insert(ino);
        at = end + 1;
      }
      {
        std::lock_guard lock(mu_);
        known.push_back(path);
      }
      found(i);
    }
    return {};
  }
  // As the kernel lists a folder whose listing it has not cached, with attributes (READDIRPLUS),
  // where `lists`; else as it serves one from its cache (no request, no inode made).
  Status list_folder(const std::string& path, std::string_view until) override {
    {
      std::lock_guard lock(mu_);
      listed.push_back(path);
    }
    if (through == nullptr || !lists) return {};
    uint64_t ino = 1;
    for (size_t at = 0; at < path.size();) {
      const size_t end = std::min(path.find('/', at), path.size());
      auto e = through->lookup(ino, path.substr(at, end - at));
      if (!e.ok() || e->ino == 0) return Error{ENOENT, path};
      ino = e->ino;
      at = end + 1;
    }
    for (size_t i = 0;; ++i) {
      auto d = through->entry_at(ino, i);
      if (!d.ok()) return d.error();
      if (!*d) return {};
      auto entry = through->listed_entry(**d);
      if (!entry.ok()) return Error{EIO, path};
      {
        std::lock_guard lock(mu_);
        inodes.insert(entry->ino);
      }
      if ((*d)->name == until) return {};
    }
  }
  std::map<uint64_t, std::vector<uint8_t>> take() {
    std::lock_guard lock(mu_);
    return std::exchange(stored, {});
  }
  // Inodes the kernel holds: those the test looked up (note()), make_known made and listings made.
  void note(uint64_t ino) {
    std::lock_guard lock(mu_);
    inodes.insert(ino);
  }
  std::set<uint64_t> inodes;
  bool strict = false;  // stores only into inodes it holds (ENOENT otherwise), as the kernel does
  int refuse = 0;  // an errno every store answers with
  int calls = 0;
  core::Filesystem* through = nullptr;
  std::vector<std::string> known;  // the paths make_known looked up
  bool lists = false;
  std::vector<std::string> listed;  // the folders list_folder listed

 private:
  std::mutex mu_;
  std::map<uint64_t, std::vector<uint8_t>> stored;
};

}  // namespace fid::testutil
