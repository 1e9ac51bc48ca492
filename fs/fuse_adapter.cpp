// Every FUSE handler: decode the request, call core::Filesystem, reply. Protocol choices live
// here (timeouts, no-open, readdirplus, capabilities); what the tree is and does lives in core/.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <span>
#include <thread>
#include <vector>

#include "common/ascii.h"
#include "common/fd.h"
#include "core/filesystem.h"
#include "fs/fuse_transport.h"
#include "fs/fuse_uring.h"
#include "fs/kernel_notifier.h"
#include "common/log.h"

namespace fid::fs {

namespace {



constexpr double kTimeout = 86400.0;  // every inode is immutable: the kernel may keep what it learns
// Background requests (readahead READs) the kernel keeps in flight at once: room for a few hundred
// reader threads, each with a readahead or two outstanding (op_init says why it matters).
constexpr unsigned kMaxBackground = 256;

core::Filesystem& core_of(fuse_req_t req) { return *static_cast<core::Filesystem*>(fuse_req_userdata(req)); }

// Every error reply: the core counts and logs it (core/request_errors.h), the kernel gets the errno.
void reply_error(fuse_req_t req, core::Request op, uint64_t ino, std::string_view detail, const Error& e) {
  core_of(req).request_errors().failed(op, ino, detail, e);
  fuse_reply_err(req, e.code);
}

void reply_status(fuse_req_t req, core::Request op, uint64_t ino, std::string_view detail, const Status& s) {
  if (s.ok()) fuse_reply_err(req, 0);
  else reply_error(req, op, ino, detail, s.error());
}

fuse_entry_param entry_param(const core::Filesystem::Entry& e) {
  fuse_entry_param p{};
  p.ino = e.ino;
  p.generation = e.generation;
  p.attr = e.attr;
  p.attr_timeout = kTimeout;
  p.entry_timeout = e.name_cacheable ? kTimeout : 0;
  return p;
}

// Listings (readdir=): plus fills dentries and attributes in one round trip but makes the kernel
// instantiate every entry; plain sends names only (a LOOKUP at first open); auto lets the kernel
// use plus for a folder's first chunk only (scripts/bench/scale.sh chose it as the default).
void want_readdir(fuse_conn_info* conn, config::Readdir mode) {
  conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  if (mode == config::Readdir::plain || !(conn->capable & FUSE_CAP_READDIRPLUS)) return;
  conn->want |= FUSE_CAP_READDIRPLUS;
  if (mode == config::Readdir::auto_ && (conn->capable & FUSE_CAP_READDIRPLUS_AUTO)) conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  const core::Filesystem& fs = *static_cast<core::Filesystem*>(userdata);
  want_readdir(conn, fs.settings().readdir);
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;  // inodes are immutable: cached pages stay valid
  // Without OPEN requests an O_TRUNC open must reach us as a SETATTR (which gets EROFS).
  conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  conn->max_readahead = std::max<unsigned>(conn->max_readahead, 1u << 20);
  // Under the kernel's default of 12 background requests, congested from 9, a reader that finds 9
  // READs in flight drops the rest of its readahead and reads its file in several READs, some
  // synchronous: 32 loader threads made 3.6 READs a file at full and fell to half the files/s of
  // 8 (docs/BENCHMARKS.md, "Many readers at once"). The kernel clamps these for a daemon without
  // CAP_SYS_ADMIN (the fuse module's max_user_bgreq and max_user_congthresh).
  conn->max_background = kMaxBackground;
  conn->congestion_threshold = kMaxBackground * 3 / 4;
  log_info("{}", fs.describe());
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto e = core_of(req).lookup(parent, name);
  if (!e.ok()) return reply_error(req, core::Request::lookup, parent, name, e.error());
  fuse_entry_param p = entry_param(*e);  // ino 0: a negative entry, cached (the tree never changes)
  core::Filesystem& fs = core_of(req);    // the request is gone once answered
  fuse_reply_entry(req, &p);
  if (e->ino != 0) fs.lookup_replied(e->ino);
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }  // inodes are arithmetic
void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto st = core_of(req).getattr(ino);
  if (!st.ok()) return reply_error(req, core::Request::getattr, ino, {}, st.error());
  fuse_reply_attr(req, &*st, kTimeout);
}

void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  reply_status(req, core::Request::access, ino, {}, core_of(req).access(ino, mask));
}

// Files are not opened (the daemon answers OPEN with ENOSYS once, after which the kernel sends
// no OPEN/RELEASE at all and keeps every cached page: inodes are immutable; a warm read never
// reaches the daemon), except where large views are read directly (core::Filesystem::OpenMode).
void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto mode = core_of(req).open(ino, fi->flags);
  if (!mode.ok()) return reply_error(req, core::Request::open, ino, {}, mode.error());
  if (!mode->answered) return (void)fuse_reply_err(req, ENOSYS);
  fi->direct_io = mode->direct_io;
  fi->keep_cache = !mode->direct_io;
  fi->noflush = 1;
  fuse_reply_open(req, fi);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  auto r = core_of(req).read(ino, static_cast<uint64_t>(off), size, (fi->flags & O_DIRECT) == 0);
  if (!r.ok()) return reply_error(req, core::Request::read, ino, {}, r.error());
  if (r->tail.empty()) {
    fuse_reply_buf(req, reinterpret_cast<const char*>(r->data.data()), r->data.size());
    return;
  }
  iovec parts[2] = {{const_cast<uint8_t*>(r->data.data()), r->data.size()}, {const_cast<uint8_t*>(r->tail.data()), r->tail.size()}};
  fuse_reply_iov(req, parts, 2);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Status s = core_of(req).opendir(ino, fi->flags);
  if (!s.ok()) return reply_error(req, core::Request::opendir, ino, {}, s.error());
  fi->cache_readdir = 1;  // listings never change
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  core::Filesystem& fs = core_of(req);
  std::vector<char> buf(size);
  size_t used = 0;
  for (size_t i = static_cast<size_t>(off);; ++i) {
    auto e = fs.entry_at(ino, i);
    if (!e.ok()) return reply_error(req, core::Request::readdir, ino, {}, e.error());
    if (!*e) break;
    const std::string name((*e)->name);
    size_t need;
    if (plus) {
      // An entry that does not fit ends this chunk before its attributes are taken: taking them
      // tells the daemon the kernel knows the name.
      if (fuse_add_direntry_plus(req, nullptr, 0, name.c_str(), nullptr, 0) > size - used) break;
      // An entry without attributes ends this chunk; the next request starts at it and gets the
      // error, so a listing is never silently short.
      auto entry = fs.listed_entry(**e);
      if (!entry.ok()) {
        if (used == 0) return reply_error(req, core::Request::readdir, ino, name, entry.error());
        break;
      }
      fuse_entry_param p = entry_param(*entry);
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &p, static_cast<off_t>(i + 1));
    } else {
      struct stat st {};
      st.st_ino = (*e)->ino;
      st.st_mode = (*e)->type;
      need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st, static_cast<off_t>(i + 1));
    }
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  do_readdir(req, ino, size, off, false);
}
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  do_readdir(req, ino, size, off, true);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st = core_of(req).statfs();
  fuse_reply_statfs(req, &st);
}

// size 0 asks for the length; a buffer too small for the value is ERANGE.
void reply_value(fuse_req_t req, core::Request op, uint64_t ino, std::string_view name, const Result<std::string>& v,
                 size_t size) {
  if (!v.ok()) reply_error(req, op, ino, name, v.error());
  else if (size == 0) fuse_reply_xattr(req, v->size());
  else if (size < v->size()) reply_error(req, op, ino, name, Error{ERANGE, fmt::format("a {} byte buffer for {} bytes", size, v->size())});
  else fuse_reply_buf(req, v->data(), v->size());
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  reply_value(req, core::Request::getxattr, ino, name, core_of(req).getxattr(ino, name), size);
}
void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  reply_value(req, core::Request::listxattr, ino, {}, core_of(req).listxattr(ino), size);
}


// The requesting process's uid, gid and supplementary groups (read by libfuse from /proc).
core::Caller caller_of(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  core::Caller c{ctx->uid, ctx->gid, {}};
  c.groups.resize(64);
  int n = fuse_req_getgroups(req, static_cast<int>(c.groups.size()), c.groups.data());
  if (n > static_cast<int>(c.groups.size())) {
    c.groups.resize(static_cast<size_t>(n));
    n = fuse_req_getgroups(req, n, c.groups.data());
  }
  c.groups.resize(static_cast<size_t>(std::clamp(n, 0, static_cast<int>(c.groups.size()))));
  return c;
}

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  core::Filesystem& fs = core_of(req);
  auto in_flight = fs.change_in_flight(ino);  // until after the reply
  reply_status(req, core::Request::setxattr, ino, fmt::format("{}='{}'", name, printable({value, size})),
               fs.setxattr(ino, name, {value, size}, flags, caller_of(req)));
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  core::Filesystem& fs = core_of(req);
  auto in_flight = fs.change_in_flight(ino);  // until after the reply
  reply_status(req, core::Request::removexattr, ino, name, fs.removexattr(ino, name, caller_of(req)));
}

// A read-only tree: every request that would change it.
template <core::Request Op>
void refuse(fuse_req_t req, fuse_ino_t ino) {
  reply_error(req, Op, ino, {}, Error{EROFS, "a read-only file system"});
}
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat*, int, fuse_file_info*) { refuse<core::Request::setattr>(req, ino); }
void op_mknod(fuse_req_t req, fuse_ino_t dir, const char*, mode_t, dev_t) { refuse<core::Request::mknod>(req, dir); }
void op_mkdir(fuse_req_t req, fuse_ino_t dir, const char*, mode_t) { refuse<core::Request::mkdir>(req, dir); }
void op_unlink(fuse_req_t req, fuse_ino_t dir, const char*) { refuse<core::Request::unlink>(req, dir); }
void op_rmdir(fuse_req_t req, fuse_ino_t dir, const char*) { refuse<core::Request::rmdir>(req, dir); }
void op_symlink(fuse_req_t req, const char*, fuse_ino_t dir, const char*) { refuse<core::Request::symlink>(req, dir); }
void op_rename(fuse_req_t req, fuse_ino_t dir, const char*, fuse_ino_t, const char*, unsigned) { refuse<core::Request::rename>(req, dir); }
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t, const char*) { refuse<core::Request::link>(req, ino); }
void op_write(fuse_req_t req, fuse_ino_t ino, const char*, size_t, off_t, fuse_file_info*) { refuse<core::Request::write>(req, ino); }
void op_create(fuse_req_t req, fuse_ino_t dir, const char*, mode_t, fuse_file_info*) { refuse<core::Request::create>(req, dir); }
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int, off_t, off_t, fuse_file_info*) { refuse<core::Request::fallocate>(req, ino); }
void op_readlink(fuse_req_t req, fuse_ino_t ino) {  // there are no links
  reply_error(req, core::Request::readlink, ino, {}, Error{EINVAL, "not a symbolic link"});
}

// Every request is counted (stats' "requests"). A handler that throws (out of memory, the one
// exception the core lets through) answers the request with an error, counted and logged like
// any other, instead of ending the daemon: an exception must not cross libfuse's C.
template <core::Request Op, auto Handler>
struct Answered;
template <core::Request Op, class... Args, void (*Handler)(fuse_req_t, Args...)>
struct Answered<Op, Handler> {
  static void op(fuse_req_t req, Args... args) {
    core_of(req).received(Op, inode_of(args...));
    try {
      Handler(req, args...);
    } catch (const std::bad_alloc&) {
      reply_error(req, Op, inode_of(args...), {}, Error{ENOMEM, "out of memory"});
    } catch (const std::exception& e) {
      reply_error(req, Op, inode_of(args...), {}, Error{EIO, e.what()});
    }
  }
  // The inode a request names: its first inode argument (the file's, or its folder's).
  static uint64_t inode_of(Args... args) {
    uint64_t ino = 0;
    ((ino = ino != 0 ? ino : as_inode(args)), ...);
    return ino;
  }
  static uint64_t as_inode(fuse_ino_t ino) { return ino; }
  template <class T>
  static uint64_t as_inode(T) {
    return 0;
  }
};

const fuse_lowlevel_ops& operations() {
  static const fuse_lowlevel_ops o = [] {
    fuse_lowlevel_ops x{};
    x.init = op_init;
    x.lookup = Answered<core::Request::lookup, op_lookup>::op;
    x.forget = op_forget;
    x.forget_multi = op_forget_multi;
    x.getattr = Answered<core::Request::getattr, op_getattr>::op;
    x.setattr = Answered<core::Request::setattr, op_setattr>::op;
    x.readlink = Answered<core::Request::readlink, op_readlink>::op;
    x.mknod = Answered<core::Request::mknod, op_mknod>::op;
    x.mkdir = Answered<core::Request::mkdir, op_mkdir>::op;
    x.unlink = Answered<core::Request::unlink, op_unlink>::op;
    x.rmdir = Answered<core::Request::rmdir, op_rmdir>::op;
    x.symlink = Answered<core::Request::symlink, op_symlink>::op;
    x.rename = Answered<core::Request::rename, op_rename>::op;
    x.link = Answered<core::Request::link, op_link>::op;
    x.open = Answered<core::Request::open, op_open>::op;
    x.read = Answered<core::Request::read, op_read>::op;
    x.write = Answered<core::Request::write, op_write>::op;
    x.opendir = Answered<core::Request::opendir, op_opendir>::op;
    x.readdir = Answered<core::Request::readdir, op_readdir>::op;
    x.readdirplus = Answered<core::Request::readdir, op_readdirplus>::op;
    x.statfs = Answered<core::Request::statfs, op_statfs>::op;
    x.setxattr = Answered<core::Request::setxattr, op_setxattr>::op;
    x.getxattr = Answered<core::Request::getxattr, op_getxattr>::op;
    x.listxattr = Answered<core::Request::listxattr, op_listxattr>::op;
    x.removexattr = Answered<core::Request::removexattr, op_removexattr>::op;
    x.access = Answered<core::Request::access, op_access>::op;
    x.create = Answered<core::Request::create, op_create>::op;
    x.fallocate = Answered<core::Request::fallocate, op_fallocate>::op;
    return x;
  }();
  return o;
}

// The kernel reads FUSE files in readahead-sized requests (128 KiB by default); raise the mount's
// readahead to 1 MiB (FUSE's largest request) so most files are one request. Needs root; best
// effort. Whether the mount's readahead is 1 MiB now.
bool set_readahead(dev_t dev) {
  const std::string path = fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", major(dev), minor(dev));
  {
    const Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() >= 0) {
      ssize_t w = ::write(fd.get(), "1024", 4);
      (void)w;
    }
  }
  char now[32] = {};
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.get() >= 0 && ::read(fd.get(), now, sizeof now - 1) > 0 && std::atoi(now) >= 1024;
}

std::string escape_opt(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

fuse_session* new_session(core::Filesystem& fs, const index::Store& store, const config::Settings& settings, bool debug) {
  std::vector<std::string> argv_s = {"fidelityfs"};
  if (debug) argv_s.push_back("-d");
  std::string o = "fsname=" + escape_opt("fidelityfs:" + store.location()) + ",subtype=fidelityfs";
  if (settings.allow_other) o += ",allow_other";
  argv_s.push_back("-o");
  argv_s.push_back(o);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  return fuse_session_new(&args, &operations(), sizeof(fuse_lowlevel_ops), &fs);
}

// Runs the request loop until unmount or a signal.
int loop(fuse_session* se, const config::Settings& settings) {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, settings.threads);
  // Every worker stays: workers that exit and start again as load comes and goes (readers waiting
  // for a record load keep workers busy) each leave their request buffer in another malloc arena.
  fuse_loop_cfg_set_idle_threads(cfg, settings.threads);
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  return rc;
}

// Ends the request loop on SIGTERM, SIGINT or SIGHUP in an order that cannot wait on the kernel:
// first the level changes' invalidations stop (one in progress may need a folder lock that a
// lookup holds until a worker answers it, so the workers still answer), then the loop ends. A
// signal only writes to a pipe; a thread of this watch does the rest.
class SignalWatch {
 public:
  // `pipe`: a non-blocking pipe (read end, write end) the watch owns from now on.
  SignalWatch(fuse_session* se, core::Filesystem& fs, std::pair<Fd, Fd> pipe)
      : se_(se), fs_(fs), loop_thread_(::pthread_self()), pipe_(std::move(pipe)) {
    write_end_.store(pipe_.second.get());
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : kSignals) ::sigaction(sig, &sa, &old_[index_of(sig)]);
    thread_ = std::thread([this] { watch(); });
  }
  ~SignalWatch() {
    loop_ended_.store(true);
    wake('q');
    thread_.join();
    for (int sig : kSignals) ::sigaction(sig, &old_[index_of(sig)], nullptr);
    write_end_.store(-1);
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

 private:
  static constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
  static size_t index_of(int sig) { return sig == SIGTERM ? 0 : sig == SIGINT ? 1 : 2; }
  static inline std::atomic<int> write_end_{-1};
  static void on_signal(int) {
    const int saved = errno;
    const int fd = write_end_.load();
    if (fd >= 0) (void)!::write(fd, "s", 1);
    errno = saved;
  }
  static void wake(char c) {
    const int fd = write_end_.load();
    if (fd >= 0) (void)!::write(fd, &c, 1);
  }
  void watch() {
    for (;;) {
      pollfd p{pipe_.first.get(), POLLIN, 0};
      if (::poll(&p, 1, -1) < 0) continue;
      char c = 0;
      if (::read(pipe_.first.get(), &c, 1) != 1) continue;
      if (c == 'q') return;
      fs_.detach();
      fuse_session_exit(se_);
      // The loop's thread waits on a semaphore that a signal interrupts; until it has seen the
      // exit, interrupt it again (a signal just before its wait would be lost).
      while (!loop_ended_.load()) {
        ::pthread_kill(loop_thread_, SIGHUP);
        pollfd q{pipe_.first.get(), POLLIN, 0};
        if (::poll(&q, 1, 100) > 0 && ::read(pipe_.first.get(), &c, 1) == 1 && c == 'q') return;
      }
      return;
    }
  }

  fuse_session* se_;
  core::Filesystem& fs_;
  const pthread_t loop_thread_;
  const std::pair<Fd, Fd> pipe_;
  struct sigaction old_[3] {};
  std::atomic<bool> loop_ended_{false};
  std::thread thread_;
};

// fuse_session_mount, with what libfuse and the fusermount3 it may run say on stderr taken into
// `why` (their reason, one line) instead of reaching the terminal apart from the error.
int mount_saying_why(fuse_session* se, const std::string& mountpoint, std::string& why) {
  int pipe_fds[2];
  const Fd saved(::dup(STDERR_FILENO));
  if (saved.get() < 0 || ::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return fuse_session_mount(se, mountpoint.c_str());
  const Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);
  (void)::dup2(write_end.get(), STDERR_FILENO);  // without O_CLOEXEC: fusermount3 inherits it
  write_end.reset();
  const int rc = fuse_session_mount(se, mountpoint.c_str());
  (void)::dup2(saved.get(), STDERR_FILENO);
  char buf[4096];
  for (ssize_t n; (n = ::read(read_end.get(), buf, sizeof buf)) > 0;) why.append(buf, static_cast<size_t>(n));
  if (rc == 0 && !why.empty()) log_info("mounting said: {}", printable(why, 4096));
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  for (char& c : why)
    if (c == '\n') c = ';';
  why = printable(why, 1024);
  return rc;
}

// Unmounts the mount where it is now, never what its old path names. libfuse unmounts by the
// path it mounted at: after a mount --move that would be whatever is there now (and the moved
// mount left dead), and over a covered mount the one covering it.
void unmount(fuse_session* se, const OwnMount& mount, const std::string& mountpoint) {
  if (mount.device() == 0) return fuse_session_unmount(se);  // it never answered: where it was mounted
  const OwnMount::Place at = mount.place();
  if (at.state == OwnMount::Place::open && at.point == mount.real_mountpoint()) return fuse_session_unmount(se);
  if (at.state == OwnMount::Place::covered)
    log_warn("{}: another mount covers this one, so it is left mounted (and dead) for its owner: fusermount3 -u {} "
             "after the covering one", mountpoint, mountpoint);
  if (at.state != OwnMount::Place::open) return;  // unmounted already: the session's fd closes with it
  log_info("the mount was moved from {} to {}: unmounting it there", mountpoint, at.point);
  // The device closed first, as libfuse does: the unmount's last reference would otherwise wait for
  // this daemon to answer DESTROY. Replaced by /dev/null rather than closed, as the session closes it.
  const Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null.get() >= 0) (void)::dup2(null.get(), fuse_session_fd(se));
  if (::umount2(at.point.c_str(), MNT_DETACH) == 0) return;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", "-u", "-q", "-z", "--", at.point.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid > 0) (void)::waitpid(pid, nullptr, 0);
}

}  // namespace

Status serve(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
             const ServeRequest& req, const std::function<void(const std::string&)>& ready) {
  core::Filesystem fs(store, source, settings, {req.mountpoint, req.l3_decoder, ::getuid(), req.level_change_group, {}, req.video_decoder});
  const auto failed = [&](std::string why) {
    ready(why);
    return Error{EIO, std::move(why)};
  };
  int signal_pipe[2];
  if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return failed(fmt::format("cannot make the pipe that signals are written to: {}", std::strerror(errno)));
  std::pair<Fd, Fd> signal_ends{Fd(signal_pipe[0]), Fd(signal_pipe[1])};
  fuse_session* se = new_session(fs, store, settings, req.debug);
  if (!se) return failed("cannot create the FUSE session (see messages above)");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return failed("cannot install signal handlers");
  }
  if (settings.transport == config::Transport::uring) {
    if (std::string off = uring_unavailable_reason(); !off.empty()) {
      fuse_remove_signal_handlers(se);
      fuse_session_destroy(se);
      return failed(fmt::format("transport=uring: {}", off));
    }
  }
  std::string why;
  if (mount_saying_why(se, req.mountpoint, why) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return failed(fmt::format("cannot mount at {}: {}", req.mountpoint,
                              why.empty() ? "(is /dev/fuse available and the mount point an empty directory?)" : why));
  }
  TransportOptions transport{settings.transport, settings.threads, [&fs](const std::string& in_use, unsigned threads_a_request) { fs.set_transport(in_use, threads_a_request); }};
  if (const int rc = use_own_transport(se, std::move(transport)); rc != 0)  // before the first request: INIT
    log_warn("lookups in one folder run one at a time: the FUSE transport could not be set: {}", std::strerror(-rc));
  KernelNotifier kernel(se, req.mountpoint);
  // Ready once the kernel routes a stat of the mount point to this session (root inode 1).
  std::thread probe([mnt = req.mountpoint, ready, &fs, &kernel] {
    struct stat st {};
    if (::stat(mnt.c_str(), &st) == 0 && st.st_ino == 1) {
      if (const std::string failure = transport_failure(); !failure.empty()) {  // INIT is answered: the stat was
        ready(fmt::format("{}: transport=uring: {}", mnt, failure));
        ::kill(::getpid(), SIGTERM);  // the mount ends as on SIGTERM
        return;
      }
      const bool readahead_1m = set_readahead(st.st_dev);
      fs.read_large_views_directly(!readahead_1m && kernel_maps_direct_io_files());
      if (fs.large_views_direct())
        log_info("views over 1 MiB are read with direct I/O (requests of up to 1 MiB): the mount's readahead "
                 "stays at 128 KiB without root");
      kernel.mount_answers(st.st_dev);
      ready("");
    } else {
      ready(fmt::format("{}: the new mount does not answer: {}", mnt, std::strerror(errno)));
    }
  });
  fs.attach(&kernel);
  int rc;
  {
    SignalWatch signals(se, fs, std::move(signal_ends));
    rc = loop(se, settings);
  }
  probe.join();
  fs.detach();  // after an unmount from outside: the connection is gone, nothing waits on it
  stop_own_transport();
  unmount(se, kernel.mount(), req.mountpoint);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  log_info("unmounted {}", req.mountpoint);
  if (rc < 0) return Error{-rc, fmt::format("{}: the FUSE session ended with an error: {}", req.mountpoint, std::strerror(-rc))};
  return {};  // rc > 0: ended by a signal (SIGTERM/SIGINT/SIGHUP), a clean unmount
}

}  // namespace fid::fs
