// core::Filesystem without a mount: what the FUSE adapter asks for, answered on inode numbers.
// Names, attributes and bytes agree with the store; /.fidelity is reachable but not listed; a
// level change gives files new inodes, tells the kernel (a recording KernelCache) which names
// went stale (a kernel that fails to forget one fails no change), and leaves an inode looked up
// before reading its old level; errno values of the refusals.
#include <gtest/gtest.h>
#include <functional>
#include <sys/xattr.h>

#include <fcntl.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/filesystem.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

using fid::core::Filesystem;
using fid::storage::LocalRecordSource;

namespace {

class RecordingKernel final : public fid::core::KernelCache {
 public:
  fid::Status forget_entry(uint64_t parent, std::string_view name) override {
    std::unique_lock lock(mu_);
    if (locked_parent && *locked_parent == parent) {
      // The folder's lock is held by a process that waits for the changed node's lock, which
      // the kernel gives back only after the change is answered.
      if (!cv_.wait_for(lock, std::chrono::seconds(3), [&] { return !locked_parent; })) waited_for_ever = true;
    }
    entries.emplace(parent, std::string(name));
    if (fail) return fid::Error{fail, "invalidating entry failed"};
    return {};
  }
  void forget_inode(uint64_t ino) override {
    std::lock_guard lock(mu_);
    inodes.insert(ino);
  }
  fid::Status store(uint64_t, std::span<const uint8_t>, std::span<const uint8_t>) override { return {}; }
  fid::Status make_known(std::span<const std::string>, const std::function<void(size_t)>&) override { return {}; }
  fid::Status list_folder(const std::string&, std::string_view) override { return {}; }
  void unlock_parent() {
    {
      std::lock_guard lock(mu_);
      locked_parent.reset();
    }
    cv_.notify_all();
  }
  bool has_entry(uint64_t parent, const std::string& name) {
    std::lock_guard lock(mu_);
    return entries.count({parent, name}) != 0;
  }
  int fail = 0;  // an errno every forget_entry answers with, as a kernel that cannot do it would
  std::optional<uint64_t> locked_parent;  // forget_entry under it waits for unlock_parent()
  bool waited_for_ever = false;           // ... and it did not come (a deadlock in a real kernel)
  std::set<std::pair<uint64_t, std::string>> entries;
  std::set<uint64_t> inodes;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

using fid::core::Caller;
constexpr uid_t kOwnerUid = 1000;
constexpr gid_t kTrainGid = 2000;
const Caller kOwner{kOwnerUid, kOwnerUid, {}};

class FilesystemTest : public fid::testutil::PackedStore {
 protected:
  void SetUp() override {
    PackedStore::SetUp();
    source_ = std::make_unique<LocalRecordSource>(store());
    settings_.scan_group = 5;
    remount();
  }
  void remount(std::optional<gid_t> group = std::nullopt, std::function<void(uint64_t)> after_level_read = {}) {
    if (fs_) fs_->detach();
    fs_ = std::make_unique<Filesystem>(store(), *source_, settings_,
                                       Filesystem::Options{"/mnt/test", nullptr, kOwnerUid, group, after_level_read});
  }
  void TearDown() override { fs_->detach(); }
  uint64_t lookup(uint64_t parent, const std::string& name) {
    auto e = fs_->lookup(parent, name);
    EXPECT_TRUE(e.ok()) << name;
    return e.ok() ? e->ino : 0;
  }
  std::vector<uint8_t> read_all(uint64_t ino) {
    auto st = fs_->getattr(ino);
    EXPECT_TRUE(st.ok());
    auto r = fs_->read(ino, 0, static_cast<uint64_t>(st->st_size) + 100);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r->to_vector();
  }
  const fid::index::File& file(const std::string& rel) const {
    for (const auto& f : store().files())
      if (store().relative_path(f) == rel) return f;
    throw std::runtime_error(rel);
  }

  fid::config::Settings settings_;
  std::unique_ptr<LocalRecordSource> source_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FilesystemTest, NamesAttributesAndBytesAgreeWithTheStore) {
  const uint64_t dog = lookup(1, "dog");
  const uint64_t ino = lookup(dog, "0.JPEG");
  const auto& f = file("dog/0.JPEG");
  auto st = fs_->getattr(ino);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(static_cast<uint64_t>(st->st_size), store().size_at_level(f, 5));
  EXPECT_EQ(read_all(ino), expected(f, 5));
  auto missing = fs_->lookup(dog, "nope.JPEG");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->ino, 0u);  // a negative entry
  EXPECT_EQ(fs_->lookup(ino, "x").error().code, ENOTDIR);
  // The root lists the store's folders and files, never /.fidelity; its name still resolves.
  std::set<std::string> names;
  for (size_t i = 0;; ++i) {
    auto e = fs_->entry_at(1, i);
    ASSERT_TRUE(e.ok());
    if (!*e) break;
    names.insert(std::string((*e)->name));
  }
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "cat", "dog", "notes.txt"}));
  const uint64_t ctl = lookup(1, ".fidelity");
  const uint64_t sg3 = lookup(lookup(ctl, "sg"), "3");
  EXPECT_EQ(read_all(lookup(lookup(sg3, "dog"), "0.JPEG")), expected(f, 3));
}

TEST_F(FilesystemTest, ALevelChangeMakesNewInodesAndTellsTheKernel) {
  RecordingKernel kernel;
  fs_->attach(&kernel);
  const uint64_t dog = lookup(1, "dog");
  const uint64_t before = lookup(dog, "0.JPEG");
  const auto& f = file("dog/0.JPEG");
  {
    auto in_flight = fs_->change_in_flight(dog);
    ASSERT_TRUE(fs_->setxattr(dog, "user.fidelity.scan_group", "2\n", 0, kOwner).ok());
  }
  fs_->wait_invalidations();  // those of the folder in flight went to the background thread
  EXPECT_TRUE(kernel.has_entry(1, "dog"));  // the folder's own name
  EXPECT_TRUE(kernel.has_entry(dog, "0.JPEG"));  // a file the kernel was told about
  const uint64_t after = lookup(dog, "0.JPEG");
  EXPECT_NE(after, before);
  EXPECT_EQ(read_all(after), expected(f, 2));
  EXPECT_EQ(read_all(before), expected(f, 5));  // what an open descriptor keeps reading
  auto level = fs_->getxattr(dog, "user.fidelity.scan_group");
  ASSERT_TRUE(level.ok());
  EXPECT_EQ(*level, "2");
  ASSERT_TRUE(fs_->removexattr(dog, "user.fidelity.scan_group", kOwner).ok());
  EXPECT_EQ(fs_->removexattr(dog, "user.fidelity.scan_group", kOwner).error().code, ENODATA);
  EXPECT_EQ(lookup(dog, "0.JPEG"), before);  // back to the mount's level: the same inode as before
}

// A folder's level changed between a lookup's reading of a file's level and the reply: the reply
// has the new level, or the kernel is told to forget the name (never an old-level inode cached
// for the entry timeout, a day).
TEST_F(FilesystemTest, ALevelChangeDuringALookupLeavesNoOldLevelCached) {
  RecordingKernel kernel;
  const auto& f = file("dog/0.JPEG");
  uint64_t dog = 0;
  bool changed = false;
  remount(std::nullopt, [&](uint64_t ino) {
    if (changed || ino == dog || dog == 0) return;
    changed = true;
    auto in_flight = fs_->change_in_flight(dog);
    ASSERT_TRUE(fs_->setxattr(dog, "user.fidelity.scan_group", "2", 0, kOwner).ok());
  });
  fs_->attach(&kernel);
  dog = lookup(1, "dog");
  const uint64_t got = lookup(dog, "0.JPEG");
  ASSERT_TRUE(changed);
  fs_->wait_invalidations();
  const bool new_level = read_all(got) == expected(f, 2);
  EXPECT_TRUE(new_level || kernel.has_entry(dog, "0.JPEG")) << "the old level stays cached";
  EXPECT_EQ(got, lookup(dog, "0.JPEG"));
}

// `setfattr P/F` against `rm P/F`: rm holds P's lock and waits for F's, which the kernel holds
// until the change of F is answered. Invalidating F's name needs P's lock, so the change must
// answer without waiting for it (a real kernel deadlocks there); the name goes stale after.
// Folders alike (rmdir P/D holds P; the kernel holds D during D's change).
TEST_F(FilesystemTest, AChangeAnswersWhileItsOwnNameWaitsForItsParentsLock) {
  RecordingKernel kernel;
  fs_->attach(&kernel);
  const uint64_t dog = lookup(1, "dog");
  const uint64_t file = lookup(dog, "0.JPEG");
  for (auto [node, parent, name] : {std::tuple{file, dog, "0.JPEG"}, std::tuple{dog, uint64_t{1}, "dog"}}) {
    kernel.locked_parent = parent;
    {
      auto in_flight = fs_->change_in_flight(node);
      ASSERT_TRUE(fs_->setxattr(node, "user.fidelity.scan_group", "2", 0, kOwner).ok());
    }  // the reply: the kernel gives the node's lock back, rm goes on and unlocks the parent
    kernel.unlock_parent();
    fs_->wait_invalidations();
    EXPECT_FALSE(kernel.waited_for_ever) << name << ": the change waited for its own name's parent";
    EXPECT_TRUE(kernel.has_entry(parent, name)) << name;
    ASSERT_TRUE(fs_->removexattr(node, "user.fidelity.scan_group", kOwner).ok());
  }
}

TEST_F(FilesystemTest, AKernelThatCannotForgetAnEntryFailsNoChange) {
  for (int code : {ENOENT, EIO}) {  // ENOENT: the kernel had no such entry; EIO: anything else (logged)
    RecordingKernel kernel;
    kernel.fail = code;
    fs_->attach(&kernel);
    const uint64_t dog = lookup(1, "dog");
    const uint64_t before = lookup(dog, "0.JPEG");
    {
      auto in_flight = fs_->change_in_flight(dog);
      ASSERT_TRUE(fs_->setxattr(dog, "user.fidelity.scan_group", "2\n", 0, kOwner).ok());
    }
    fs_->wait_invalidations();
    EXPECT_TRUE(kernel.has_entry(1, "dog"));
    EXPECT_TRUE(kernel.has_entry(dog, "0.JPEG"));  // one failure does not stop the others
    EXPECT_NE(lookup(dog, "0.JPEG"), before);
    ASSERT_TRUE(fs_->removexattr(dog, "user.fidelity.scan_group", kOwner).ok());
    fs_->detach();
  }
}

TEST_F(FilesystemTest, RefusalsHaveTheirErrno) {
  const uint64_t dog = lookup(1, "dog");
  const uint64_t jpeg = lookup(dog, "0.JPEG");
  const uint64_t blob = lookup(1, "notes.txt");
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.scan_group", "11", 0, kOwner).error().code, EINVAL);
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.scan_group", "x", 0, kOwner).error().code, EINVAL);
  EXPECT_EQ(fs_->setxattr(blob, "user.fidelity.scan_group", "3", 0, kOwner).error().code, EINVAL);
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.bytes", "3", 0, kOwner).error().code, EPERM);
  EXPECT_EQ(fs_->setxattr(jpeg, "user.other", "3", 0, kOwner).error().code, EROFS);
  // A name of ours that does not exist (a typo) says which one is meant; the seed is the root's.
  const fid::Error typo = fs_->setxattr(dog, "user.fidelity.scangroup", "3", 0, kOwner).error();
  EXPECT_EQ(typo.code, ENOTSUP);
  EXPECT_NE(typo.message.find("a level is user.fidelity.scan_group"), std::string::npos) << typo.message;
  EXPECT_EQ(fs_->removexattr(dog, "user.fidelity.scangroup", kOwner).error().code, ENOTSUP);
  EXPECT_EQ(fs_->removexattr(dog, "user.other", kOwner).error().code, ENODATA);
  EXPECT_EQ(fs_->setxattr(dog, "user.fidelity.order_seed", "1", 0, kOwner).error().code, EINVAL);
  EXPECT_EQ(fs_->removexattr(jpeg, "user.fidelity.kind", kOwner).error().code, EPERM);
  EXPECT_EQ(fs_->getxattr(jpeg, "user.fidelity.nope").error().code, ENODATA);
  EXPECT_EQ(fs_->open(jpeg, O_WRONLY).error().code, EROFS);
  EXPECT_EQ(fs_->open(dog, O_RDONLY).error().code, EISDIR);
  EXPECT_TRUE(fs_->open(jpeg, O_RDONLY).ok());
  EXPECT_EQ(fs_->opendir(jpeg, O_RDONLY).error().code, ENOTDIR);
  EXPECT_EQ(fs_->access(jpeg, W_OK).error().code, EROFS);
  EXPECT_EQ(fs_->getattr(0).error().code, ENOENT);
  EXPECT_EQ(fs_->read(dog, 0, 10).error().code, EISDIR);
  ASSERT_TRUE(fs_->setxattr(jpeg, "user.fidelity.scan_group", "4", XATTR_CREATE, kOwner).ok());
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.scan_group", "4", XATTR_CREATE, kOwner).error().code, EEXIST);
  auto bytes = fs_->getxattr(jpeg, "user.fidelity.bytes");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::count(bytes->begin(), bytes->end(), ','), store().levels() - 1);
}

TEST_F(FilesystemTest, OnlyTheOwnerAndRootChangeLevelsByDefault) {
  const uint64_t dog = lookup(1, "dog");
  const uint64_t jpeg = lookup(dog, "0.JPEG");
  const Caller root{0, 0, {}}, other{65534, 65534, {}};
  for (uint64_t ino : {uint64_t{1}, dog, jpeg}) {
    EXPECT_EQ(fs_->setxattr(ino, "user.fidelity.scan_group", "1", 0, other).error().code, EPERM) << ino;
    EXPECT_EQ(fs_->removexattr(ino, "user.fidelity.scan_group", other).error().code, EPERM) << ino;
    EXPECT_EQ(*fs_->getxattr(ino, "user.fidelity.scan_group"), "5") << ino;  // reads stay open to all
  }
  EXPECT_EQ(fs_->setxattr(1, "user.fidelity.order_seed", "7", 0, other).error().code, EPERM);
  EXPECT_EQ(fs_->removexattr(1, "user.fidelity.order_seed", other).error().code, EPERM);
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.kind", "x", 0, other).error().code, EPERM);
  EXPECT_EQ(fs_->setxattr(jpeg, "user.other", "x", 0, other).error().code, EROFS);  // not ours: the tree is read-only
  EXPECT_EQ(*fs_->getxattr(1, "user.fidelity.order_seed"), std::to_string(store().seed()));
  const Caller same_group_other_user{65533, kOwnerUid, {kOwnerUid}};
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.scan_group", "1", 0, same_group_other_user).error().code, EPERM);
  ASSERT_TRUE(fs_->setxattr(jpeg, "user.fidelity.scan_group", "3", 0, kOwner).ok());
  ASSERT_TRUE(fs_->setxattr(dog, "user.fidelity.scan_group", "2", 0, root).ok());
  ASSERT_TRUE(fs_->setxattr(1, "user.fidelity.order_seed", "7", 0, root).ok());
  EXPECT_EQ(*fs_->getxattr(1, "user.fidelity.order_seed"), "7");
  ASSERT_TRUE(fs_->removexattr(dog, "user.fidelity.scan_group", kOwner).ok());
  auto stats = nlohmann::json::parse(read_all(lookup(lookup(1, ".fidelity"), "stats")));
  EXPECT_EQ(stats["level_changes_refused"], 10);
  auto config = nlohmann::json::parse(read_all(lookup(lookup(1, ".fidelity"), "config")));
  EXPECT_EQ(config["level_changes"], "owner");
  EXPECT_EQ(config["level_changers"], "the owner (uid 1000) and root");
}

TEST_F(FilesystemTest, LevelChangesAnyoneOrAGroup) {
  const Caller other{65534, 65534, {}}, member{3000, 3000, {100, kTrainGid}}, primary{3001, kTrainGid, {}};
  settings_.level_changes = {fid::config::LevelChangers::Who::anyone, ""};
  remount();
  uint64_t jpeg = lookup(lookup(1, "dog"), "0.JPEG");
  EXPECT_TRUE(fs_->setxattr(jpeg, "user.fidelity.scan_group", "1", 0, other).ok());
  EXPECT_TRUE(fs_->setxattr(1, "user.fidelity.order_seed", "3", 0, other).ok());

  settings_.level_changes = {fid::config::LevelChangers::Who::group, "train"};
  remount(kTrainGid);
  jpeg = lookup(lookup(1, "dog"), "0.JPEG");
  EXPECT_EQ(fs_->setxattr(jpeg, "user.fidelity.scan_group", "1", 0, other).error().code, EPERM);
  EXPECT_TRUE(fs_->setxattr(jpeg, "user.fidelity.scan_group", "2", 0, member).ok());
  EXPECT_TRUE(fs_->removexattr(jpeg, "user.fidelity.scan_group", primary).ok());
  EXPECT_TRUE(fs_->setxattr(jpeg, "user.fidelity.scan_group", "4", 0, kOwner).ok());
  auto config = nlohmann::json::parse(read_all(lookup(lookup(1, ".fidelity"), "config")));
  EXPECT_EQ(config["level_changes"], "group=train");
  EXPECT_EQ(config["level_changers"], "the owner (uid 1000), root and group train (gid 2000)");
}

// An order file read while the seed changes is one order, never a mix of two: a looked-up order
// file keeps its content, and the name's next lookup is the new seed's order under a new inode.
TEST_F(FilesystemTest, AnOrderFileKeepsItsOrderWhenTheSeedChanges) {
  const uint64_t order = lookup(lookup(1, ".fidelity"), "order");
  const uint64_t before = lookup(order, "epoch-0");
  auto head = fs_->read(before, 0, 64);
  ASSERT_TRUE(head.ok());
  const std::string first(head->data.begin(), head->data.end());
  const auto old_text = read_all(before);
  ASSERT_TRUE(fs_->setxattr(1, "user.fidelity.order_seed", "12345", 0, kOwner).ok());
  EXPECT_EQ(read_all(before), old_text);  // the rest of a read started before the change
  const uint64_t after = lookup(order, "epoch-0");
  EXPECT_NE(after, before);
  EXPECT_NE(read_all(after), old_text);
  EXPECT_EQ(std::string(old_text.begin(), old_text.begin() + static_cast<long>(first.size())), first);
}

TEST_F(FilesystemTest, OrderFilesListEveryFileOnceAndDamageIsEio) {
  const uint64_t order = lookup(lookup(1, ".fidelity"), "order");
  auto text = read_all(lookup(order, "epoch-0"));
  std::multiset<std::string> lines;
  std::string line;
  for (uint8_t c : text) {
    if (c == '\n') lines.insert(std::exchange(line, {}));
    else line.push_back(static_cast<char>(c));
  }
  std::multiset<std::string> all;
  for (const auto& f : store().files()) all.insert(store().relative_path(f));
  EXPECT_EQ(lines, all);
  const auto& victim = jpeg_with(4);
  const auto& p = store().pieces(victim)[3];
  fid::testutil::flip_byte(path() / store().records()[victim.record].path, p.offset + 1);
  const std::string rel = store().relative_path(victim);
  const uint64_t ino = lookup(lookup(1, rel.substr(0, rel.find('/'))), rel.substr(rel.find('/') + 1));
  auto r = fs_->read(ino, 0, 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EIO);
}

}  // namespace
