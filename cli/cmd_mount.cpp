// fidelityfs mount STORE MOUNTPOINT [--config FILE] [-o OPT[,OPT...]] [-f] [-d]
//
// Daemonises by default: the parent returns only when the child's mount answers a stat of its
// root (exit 0), or with the child's error (exit 1). Usage/config errors exit 2 before forking,
// except gpu=on without a usable device, which only the daemon can find out (CUDA must not be
// initialised before fork), also exit 2.
#include <fcntl.h>
#include <malloc.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/doc.h"
#include "cli/store_options.h"
#include "common/fd.h"
#include "config/config.h"
#include "common/log.h"
#include "cuda/gpu.h"
#include "video/video_streams.h"
#include "fs/fs.h"
#include "index/store.h"
#include "net/url.h"
#include "storage/open_store.h"
#include "storage/remote_store.h"

extern char** environ;

namespace fid::cli {

namespace {

struct MountArgs {
  std::string store;
  std::string mountpoint;
  std::vector<std::string> options;
  std::string config;
  bool foreground = false;
  bool debug = false;
};

void err(const std::string& msg) { fmt::print(stderr, "fidelityfs mount: {}\n", msg); }

// Runs a program and waits; returns its exit status or -1.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// /proc/self/mountinfo's text for a path: space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The pids of fidelityfs processes whose command line names `mnt` (the mount and its daemon).
std::vector<std::string> fidelityfs_pids_at(const std::string& mnt) {
  std::vector<std::string> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::vector<std::string> argv;
    for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
    if (argv.size() < 3 || std::filesystem::path(argv[0]).filename() != "fidelityfs" || argv[1] != "mount") continue;
    for (size_t i = 2; i < argv.size(); ++i)
      if (std::filesystem::weakly_canonical(argv[i], ec).string() == mnt) {
        pids.push_back(pid);
        break;
      }
  }
  return pids;
}

// A fidelityfs mount already at `mnt` (or holding it): mounting another on top would hide it (and
// take two unmounts). Compared by identity, not by name: `dev` is the device that a stat of
// `mnt` resolves to (through any symbolic link), and mountinfo gives each mount's device. EBUSY
// naming what is mounted there and its daemon.
Status refuse_existing_mount(const std::string& mnt, dev_t dev) {
  std::ifstream in("/proc/self/mountinfo");
  const std::string want = fmt::format("{}:{}", major(dev), minor(dev));
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string_view> f;
    for (size_t a = 0, b; a <= line.size(); a = b + 1) {
      b = line.find(' ', a);
      if (b == std::string::npos) b = line.size();
      f.emplace_back(line.data() + a, b - a);
    }
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 2 >= f.size() || f[2] != want || f[dash + 1] != "fuse.fidelityfs") continue;
    const std::string at = unescape_mountinfo(f[4]);
    const std::vector<std::string> pids = fidelityfs_pids_at(at);
    std::error_code ec;
    const bool root = at == mnt || std::filesystem::canonical(mnt, ec).string() == at;
    const std::string what = root ? "already a fidelityfs mount" : fmt::format("resolves into the fidelityfs mount at {},", at);
    return Error{EBUSY, fmt::format("{}: {} of {}{}; unmount it first (fusermount3 -u {})", mnt, what,
                                    unescape_mountinfo(f[dash + 2]),
                                    pids.empty() ? "" : fmt::format(" (daemon pid {})", fmt::join(pids, ", ")), at)};
  }
  return {};
}

// A mount over a folder that holds files hides them until unmounted: refused unless -o nonempty.
Status refuse_nonempty(const std::string& mnt) {
  std::error_code ec;
  std::filesystem::directory_iterator it(mnt, ec);
  if (ec) return Error{ec.value(), fmt::format("{}: mount point: {}", mnt, ec.message())};
  if (it == std::filesystem::directory_iterator()) return {};
  const std::string first = it->path().filename().string();
  const bool more = ++it != std::filesystem::directory_iterator();
  return Error{ENOTEMPTY, fmt::format("{}: mount point is not empty (it holds '{}'{}), and a mount would hide its files "
                                      "until unmounted: mount on an empty folder, or add -o nonempty",
                                      mnt, first, more ? ", ..." : "")};
}

// stat and statvfs of `mnt`, bounded: over a hung FUSE mount (its daemon stopped) they would
// wait forever. ETIMEDOUT when they have not answered in 5 s. They run in a child process with
// its output on /dev/null, left behind when it does not answer: a caller's wait for a FUSE
// request the daemon has taken is not killable (FUSE over io_uring hands a request to a daemon's
// ring at once, stopped or not), so a thread of ours could hold this process's exit.
Status mountpoint_answers(const std::string& mnt) {
  const pid_t child = ::fork();
  if (child == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd <= 2; ++fd) (void)::dup2(null, fd);
    struct stat st {};
    struct statvfs sv {};
    (void)::stat(mnt.c_str(), &st);
    (void)::statvfs(mnt.c_str(), &sv);
    ::_exit(0);
  }
  if (child < 0) return Error{errno, fmt::format("{}: cannot probe the mount point: fork: {}", mnt, std::strerror(errno))};
  const Fd done(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  pollfd p{done.get(), POLLIN, 0};
  bool answered = false;
  if (done.get() >= 0) {
    int rc;
    do rc = ::poll(&p, 1, 5000);
    while (rc < 0 && errno == EINTR);
    answered = rc > 0;
  }
  int status = 0;
  if (answered || done.get() < 0) answered = ::waitpid(child, &status, 0) == child;  // no pidfd: wait unbounded
  if (answered) return {};
  return Error{ETIMEDOUT, fmt::format("{}: the mount there does not answer (a fidelityfs or other FUSE daemon stopped "
                                      "or hung); end it with fusermount3 -uz {} (or kill its daemon)", mnt, mnt)};
}

// Checks the mount point; a stale FUSE mount left by a crashed daemon ("Transport endpoint is not
// connected") is lazily unmounted and checked again. ENOTCONN when that fails and ETIMEDOUT when
// a mount there does not answer (runtime failures; anything else is a usage error).
Status check_mountpoint(const std::string& mnt, bool nonempty) {
  if (Status answers = mountpoint_answers(mnt); !answers) return answers;
  struct stat st {};
  struct statvfs sv {};
  // stat alone can be answered from attributes cached before the daemon died; statfs always
  // reaches the (dead) connection.
  // ECONNABORTED: the dead daemon served over io_uring (its rings' end aborts the connection).
  const auto gone = [] { return errno == ENOTCONN || errno == ECONNABORTED; };
  bool stale = (::stat(mnt.c_str(), &st) != 0 && gone()) || (::statvfs(mnt.c_str(), &sv) != 0 && gone());
  if (stale) {
    // Lazy unmount: umount2 when privileged, else the setuid fusermount3.
    bool ok = ::umount2(mnt.c_str(), MNT_DETACH) == 0 || run_program({"fusermount3", "-u", "-z", mnt}) == 0;
    if (!ok || ::stat(mnt.c_str(), &st) != 0 || ::statvfs(mnt.c_str(), &sv) != 0)
      return Error{ENOTCONN, fmt::format("{}: stale mount (Transport endpoint is not connected: a previous fidelityfs "
                                         "died) and the lazy unmount failed; run: fusermount3 -uz {}",
                                         mnt, mnt)};
    err(fmt::format("{}: recovered a stale mount (lazy unmount of a dead fidelityfs mount)", mnt));
  }
  if (::stat(mnt.c_str(), &st) != 0) return Error{errno, fmt::format("{}: mount point: {}", mnt, std::strerror(errno))};
  if (!S_ISDIR(st.st_mode)) return Error{ENOTDIR, fmt::format("{}: mount point is not a directory", mnt)};
  if (Status alone = refuse_existing_mount(mnt, st.st_dev); !alone) return alone;
  return nonempty ? Status{} : refuse_nonempty(mnt);
}

// The L3 decoder of the mount, from gpu=auto|on|off. Called in the process that serves (after
// fork). Null: L3 files decode on the CPU (logged once). Sets `usage_error` when gpu=on cannot be
// honoured.
std::unique_ptr<codec::L3BatchDecoder> open_l3_decoder(const config::Settings& s, const index::Store& store,
                                                      std::string& usage_error) {
  if (s.gpu == config::Gpu::off) return nullptr;
  gpu::DecoderOptions o;
  o.memory_bytes = s.gpu_memory;
  if (s.gpu == config::Gpu::emulate) {
    auto made = gpu::make_emulated_decoder(o);
    if (!made) {
      usage_error = fmt::format("gpu=emulate: {}", made.error().message);
      return nullptr;
    }
    log_info("gpu=emulate: L3 files decode through the GPU path on the CPU: {}", (*made)->description());
    return std::move(made).value();
  }
  bool has_l3 = false;
  for (const auto& f : store.files()) has_l3 = has_l3 || f.kind == index::FileKind::l3;
  if (!has_l3 && s.gpu == config::Gpu::auto_) return nullptr;  // nothing to decode: no CUDA context
  auto made = gpu::make_gpu_decoder(o);
  const std::string why = made ? std::string() : made.error().message;
  std::unique_ptr<codec::L3BatchDecoder> dec = made ? std::move(made).value() : nullptr;
  if (!dec && s.gpu == config::Gpu::on) {
    usage_error = fmt::format("gpu=on: {}; use gpu=auto or gpu=off", why);
    return nullptr;
  }
  if (dec) log_info("L3 files decode on the GPU: {} (batches of {}, {} us deadline)", dec->description(),
                        s.gpu_batch, s.gpu_deadline_us);
  else log_info("gpu=auto: L3 files decode on the CPU ({})", why);
  return dec;
}

// The gid of level_changes=group=NAME; nullopt for other settings. A group that does not exist
// is an error naming it.
Result<std::optional<gid_t>> level_change_group(const config::LevelChangers& who) {
  if (who.who != config::LevelChangers::Who::group) return std::optional<gid_t>();
  group g{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getgrnam_r(who.group.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc == 0 && found) return std::optional<gid_t>(found->gr_gid);
  return Error{rc ? rc : ENOENT,
               fmt::format("level_changes=group={}: {}", who.group, rc ? std::strerror(rc) : "no such group")};
}

// The settings of the mount: its -o lists, then the config file they or --config name, merged.
Result<config::Settings> mount_settings(const MountArgs& a) {
  config::MountOptions opts;
  for (const auto& o : a.options)
    if (Status parsed = config::parse_mount_options(o, opts); !parsed) return std::move(parsed).error();
  std::string cfg_file = a.config;
  if (opts.config_file) {
    if (!cfg_file.empty() && cfg_file != *opts.config_file)
      return Error{EINVAL, fmt::format("both --config {} and -o config={} given; use one", cfg_file, *opts.config_file)};
    cfg_file = *opts.config_file;
  }
  config::Config cfg;
  if (!cfg_file.empty()) {
    Result<config::Config> loaded = config::load_config(cfg_file);
    if (!loaded) return std::move(loaded).error();
    cfg = std::move(loaded).value();
  }
  return config::merge(cfg, opts);
}

// The mount point as an absolute path without a trailing slash.
std::string absolute_mountpoint(const std::string& mountpoint) {
  std::error_code ec;
  std::string mnt = std::filesystem::absolute(mountpoint, ec).lexically_normal().string();
  if (mnt.size() > 1 && mnt.back() == '/') mnt.pop_back();
  return mnt;
}

// STORE as the mount opens it: a URL as given, a local folder as an absolute path.
Result<std::string> store_location(const std::string& store) {
  auto url = net::parse_store_url(store);
  if (!url.ok()) return std::move(url).error();
  if (url->remote()) return store;
  std::error_code ec;
  if (!std::filesystem::is_directory(store, ec)) {
    if (std::optional<std::string> left = index::unfinished_store_beside(store))
      return Error{ENOENT, fmt::format("{}: no such store; {}", store, *left)};
    return Error{ec ? ec.value() : ENOTDIR,
                 fmt::format("{}: store folder: {}", store, ec ? ec.message() : "not a directory")};
  }
  return std::filesystem::absolute(store, ec).string();
}

// Opens the store and warns about what of it the mount cannot serve.
Result<storage::OpenedStore> open_mount_store(const std::string& location, const config::Settings& settings) {
  // A remote source starts its transfer thread on first use, after the fork of serve_daemonised.
  storage::StoreOptions open_options = store_options(settings);
  open_options.map_tables = true;
  Result<storage::OpenedStore> opened = storage::open_store(location, open_options);
  if (!opened) return opened;
  if (!opened->store->tables_problem().empty())
    err(fmt::format("warning: {} (the store's tables stay in the daemon's memory)", opened->store->tables_problem()));
  for (const auto& p : opened->source->problems()) err(fmt::format("warning: {} (its files will return EIO)", p));
  return opened;
}

// -f and -d: serves in this process until unmounted, logging to stderr or log.file.
int serve_foreground(const config::Settings& settings, storage::OpenedStore& opened, fs::ServeRequest& req) {
  const index::Store& store = *opened.store;
  auto sink = settings.log_file.empty() ? LogSink::stderr_ : LogSink::file;
  if (Status logging = log_open(settings.log_level, sink, settings.log_file); !logging.ok()) {
    err(logging.error().message);
    return kExitUsage;
  }
  std::string gpu_error;
  auto decoder = open_l3_decoder(settings, store, gpu_error);
  if (!gpu_error.empty()) {
    err(gpu_error);
    return kExitUsage;
  }
  req.l3_decoder = decoder.get();
  const std::unique_ptr<codec::GopDecoder> video = video::make_libav_gop_decoder();
  req.video_decoder = video.get();
  bool failed = false;
  Status served = fs::serve(store, *opened.source, settings, req, [&](const std::string& error) {
    if (!error.empty()) {
      failed = true;
      err(error);
    }
  });
  if (!served.ok() && !failed) err(served.error().message);
  return !served.ok() || failed ? kExitRuntime : kExitOk;
}

// The parent of the daemon: reads its answer from `ready` until the daemon closes it: "OK",
// "E" + a runtime error or "U" + a usage error, and exits accordingly.
int wait_for_daemon(pid_t pid, Fd ready) {
  std::string msg;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(ready.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  ready.reset();
  if (msg == "OK") return kExitOk;
  if (msg.size() > 1 && (msg[0] == 'E' || msg[0] == 'U')) {
    err(msg.substr(1));
    if (msg[0] == 'U') {
      ::waitpid(pid, nullptr, 0);
      return kExitUsage;
    }
  } else {
    int status = 0;
    ::waitpid(pid, &status, 0);
    err("the mount daemon exited before the mount was ready");
  }
  ::waitpid(pid, nullptr, WNOHANG);
  return kExitRuntime;
}

void tell_parent(const Fd& ready, const std::string& answer) {
  ssize_t w = ::write(ready.get(), answer.data(), answer.size());
  (void)w;  // a parent that is gone needs no answer
}

// Points stdin, stdout and stderr at /dev/null.
void detach_from_terminal() {
  Fd null(::open("/dev/null", O_RDWR));
  if (null.get() < 0) return;
  ::dup2(null.get(), 0);
  ::dup2(null.get(), 1);
  ::dup2(null.get(), 2);
  if (null.get() <= 2) null.release();  // a descriptor 0..2 is one of those it now stands for: kept
}

// Where the daemon logs: log.file (absolute: the daemon runs in /); else syslog where something
// listens on /dev/log; else, so that the lines are not lost (containers often have no syslog),
// fidelityfs.log in the cache folder, said on stderr. "" means syslog.
std::string daemon_log_file(const config::Settings& settings) {
  std::error_code ec;
  if (!settings.log_file.empty()) return std::filesystem::absolute(settings.log_file, ec).string();
  struct stat st {};
  if (::stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode)) return "";
  const std::filesystem::path dir = storage::index_cache_dir(store_options(settings));
  if (!storage::make_private_dir(dir)) return "";
  const std::string file = (dir / "fidelityfs.log").string();
  // Made 0600 like every file in the cache folder (log_open keeps an existing file's mode).
  const Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0 || ::fchmod(fd.get(), 0600) != 0) return "";
  err(fmt::format("no syslog on this machine (/dev/log): the daemon logs to {} (log.file in a config chooses)", file));
  return file;
}

// The daemon (the child of serve_daemonised): serves until unmounted, logging to syslog or
// `log_file`, and answers its parent on `ready` as wait_for_daemon reads it.
[[noreturn]] void run_daemon(const config::Settings& settings, const std::string& log_file, storage::OpenedStore& opened,
                             fs::ServeRequest& req, Fd ready) {
  const index::Store& store = *opened.store;
  ::setsid();
  if (::chdir("/") != 0) {
  }
  auto sink = log_file.empty() ? LogSink::syslog : LogSink::file;
  if (Status logging = log_open(settings.log_level, sink, log_file); !logging.ok()) {
    tell_parent(ready, "U" + logging.error().message);  // a configuration error, as with -f
    ::_exit(kExitUsage);
  }
  std::string gpu_error;
  auto decoder = open_l3_decoder(settings, store, gpu_error);
  if (!gpu_error.empty()) {
    tell_parent(ready, "U" + gpu_error);
    ::_exit(kExitUsage);
  }
  req.l3_decoder = decoder.get();
  const std::unique_ptr<codec::GopDecoder> video = video::make_libav_gop_decoder();
  req.video_decoder = video.get();
  std::mutex mu;
  Status served = fs::serve(store, *opened.source, settings, req, [&](const std::string& error) {
    std::lock_guard lock(mu);
    if (ready.get() < 0) return;
    tell_parent(ready, error.empty() ? std::string("OK") : "E" + error);
    ready.reset();
    if (error.empty()) detach_from_terminal();  // once the parent has its answer
  });
  if (!served.ok()) log_error("{}", served.error().message);
  ::_exit(served.ok() ? kExitOk : kExitRuntime);
}

// Forks the daemon; this process returns when the daemon's mount is ready or has failed.
int serve_daemonised(const config::Settings& settings, storage::OpenedStore& opened, fs::ServeRequest& req) {
  const std::string log_file = daemon_log_file(settings);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    err(fmt::format("pipe: {}", std::strerror(errno)));
    return kExitRuntime;
  }
  Fd ready_read(pipefd[0]), ready_write(pipefd[1]);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    err(fmt::format("fork: {}", std::strerror(errno)));
    return kExitRuntime;
  }
  if (pid > 0) {
    ready_write.reset();
    return wait_for_daemon(pid, std::move(ready_read));
  }
  ready_read.reset();
  run_daemon(settings, log_file, opened, req, std::move(ready_write));
}

int run_mount(const MountArgs& a) {
  // Large buffers (records, pieces, replies: 256 KiB to several MiB) always come from mmap and go
  // back to the kernel when freed. glibc would otherwise raise its threshold after the first
  // such free and serve them from per-thread arenas that keep what is freed: the daemon's peak
  // RSS under tests/integration/test_stress.py (records) was 36.6 MiB so, 31.4 MiB with this.
  (void)::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  Result<config::Settings> settings = mount_settings(a);
  if (!settings) {
    err(settings.error().message);
    return kExitUsage;
  }
  Result<std::optional<gid_t>> change_group = level_change_group(settings->level_changes);
  if (!change_group) {
    err(change_group.error().message);
    return kExitUsage;
  }
  const std::string mnt = absolute_mountpoint(a.mountpoint);
  if (Status usable = check_mountpoint(mnt, settings->nonempty); !usable) {
    err(usable.error().message);
    return usable.error().code == ENOTCONN || usable.error().code == ETIMEDOUT ? kExitRuntime : kExitUsage;
  }
  Result<std::string> location = store_location(a.store);
  if (!location) {
    err(location.error().message);
    return kExitUsage;
  }
  Result<storage::OpenedStore> opened = open_mount_store(*location, *settings);
  if (!opened) {
    err(opened.error().message);
    return kExitRuntime;
  }
  if (Status levels = config::check_levels(*settings, opened->store->levels()); !levels) {
    err(levels.error().message);
    return kExitUsage;
  }
  fs::ServeRequest req;
  req.mountpoint = mnt;
  req.debug = a.debug;
  req.level_change_group = *change_group;
  if (a.foreground || a.debug) return serve_foreground(*settings, *opened, req);
  return serve_daemonised(*settings, *opened, req);
}

}  // namespace

void register_mount(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("mount", "Mount a store as a read-only directory tree");
  auto a = std::make_shared<MountArgs>();
  cmd->add_option("STORE", a->store, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("MOUNTPOINT", a->mountpoint, "the folder to mount on: empty, unless -o nonempty")->required();
  cmd->add_option("-o", a->options, mount_options_help())->allow_extra_args(false);
  cmd->add_option("--config", a->config, "YAML configuration file");
  cmd->add_flag("-f", a->foreground, "stay in the foreground");
  cmd->add_flag("-d", a->debug, "FUSE debug output (implies -f)");
  cmd->callback([a, &exit_code] { exit_code = run_mount(*a); });
}

}  // namespace fid::cli
