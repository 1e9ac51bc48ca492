// fidelityfs mount STORE MOUNTPOINT [--config FILE] [-o OPT[,OPT...]] [-f] [-d]
//
// Daemonises by default: the parent returns only when the child's mount answers a stat of its
// root (exit 0), or with the child's error (exit 1). Usage/config errors exit 2 before forking,
// except gpu=on without a usable device, which only the daemon can find out (CUDA must not be
// initialised before fork), also exit 2.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/doc.h"
#include "config/config.h"
#include "cuda/gpu.h"
#include "fs/fs.h"
#include "core/log.h"
#include "index/store.h"
#include "cli/store_options.h"
#include "storage/open_store.h"
#include "storage/url.h"

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

// Checks the mount point; a stale FUSE mount left by a crashed daemon ("Transport endpoint is not
// connected") is lazily unmounted and checked again. Returns "" or the error, and its exit code.
std::string check_mountpoint(const std::string& mnt, int& code) {
  struct stat st {};
  struct statvfs sv {};
  // stat alone can be answered from attributes cached before the daemon died; statfs always
  // reaches the (dead) connection.
  bool stale = (::stat(mnt.c_str(), &st) != 0 && errno == ENOTCONN) ||
               (::statvfs(mnt.c_str(), &sv) != 0 && errno == ENOTCONN);
  if (stale) {
    // Lazy unmount: umount2 when privileged, else the setuid fusermount3.
    bool ok = ::umount2(mnt.c_str(), MNT_DETACH) == 0 || run_program({"fusermount3", "-u", "-z", mnt}) == 0;
    if (!ok || ::stat(mnt.c_str(), &st) != 0 || ::statvfs(mnt.c_str(), &sv) != 0) {
      code = kExitRuntime;
      return fmt::format(
          "{}: stale mount (Transport endpoint is not connected: a previous fidelityfs died) and the lazy unmount "
          "failed; run: fusermount3 -uz {}",
          mnt, mnt);
    }
    err(fmt::format("{}: recovered a stale mount (lazy unmount of a dead fidelityfs mount)", mnt));
  }
  if (::stat(mnt.c_str(), &st) != 0) {
    code = kExitUsage;
    return fmt::format("{}: mount point: {}", mnt, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    code = kExitUsage;
    return fmt::format("{}: mount point is not a directory", mnt);
  }
  return {};
}

// The L3 decoder of the mount, from gpu=auto|on|off. Called in the process that serves (after
// fork). Null: L3 files decode on the CPU (logged once). Sets `usage_error` when gpu=on cannot be
// honoured.
std::unique_ptr<codec::L3BatchDecoder> open_l3_decoder(const config::Settings& s, const index::Store& store,
                                                      std::string& usage_error) {
  if (s.gpu == config::Gpu::off) return nullptr;
  if (s.gpu == config::Gpu::emulate) {
    auto dec = codec::make_emulated_batch_decoder();
    core::log_info("gpu=emulate: L3 files decode through the GPU path on the CPU: {}", dec->description());
    return dec;
  }
  bool has_l3 = false;
  for (const auto& f : store.files()) has_l3 = has_l3 || f.kind == index::FileKind::l3;
  if (!has_l3 && s.gpu == config::Gpu::auto_) return nullptr;  // nothing to decode: no CUDA context
  gpu::DecoderOptions o;
  o.memory_bytes = s.gpu_memory;
  auto made = gpu::make_gpu_decoder(o);
  const std::string why = made ? std::string() : made.error().message;
  std::unique_ptr<codec::L3BatchDecoder> dec = made ? std::move(made).value() : nullptr;
  if (!dec && s.gpu == config::Gpu::on) {
    usage_error = fmt::format("gpu=on: {}; use gpu=auto or gpu=off", why);
    return nullptr;
  }
  if (dec) core::log_info("L3 files decode on the GPU: {} (batches of {}, {} us deadline)", dec->description(),
                        s.gpu_batch, s.gpu_deadline_us);
  else core::log_info("gpu=auto: L3 files decode on the CPU ({})", why);
  return dec;
}

// The gid of level_changes=group=NAME; nullopt for other settings. A group that does not exist
// is a usage error (`error` says which).
std::optional<gid_t> level_change_group(const config::LevelChangers& who, std::string& error) {
  if (who.who != config::LevelChangers::Who::group) return std::nullopt;
  group g{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  int rc = ::getgrnam_r(who.group.c_str(), &g, buf.data(), buf.size(), &found);
  if (rc == 0 && found) return found->gr_gid;
  error = fmt::format("level_changes=group={}: {}", who.group, rc ? std::strerror(rc) : "no such group");
  return std::nullopt;
}

int run_mount(const MountArgs& a) {
  config::MountOptions opts;
  config::Config cfg;
  try {
    for (const auto& o : a.options) config::parse_mount_options(o, opts);
    std::string cfg_file = a.config;
    if (opts.config_file) {
      if (!cfg_file.empty() && cfg_file != *opts.config_file) {
        err(fmt::format("both --config {} and -o config={} given; use one", cfg_file, *opts.config_file));
        return kExitUsage;
      }
      cfg_file = *opts.config_file;
    }
    if (!cfg_file.empty()) cfg = config::load_config(cfg_file);
  } catch (const config::ConfigError& e) {
    err(e.what());
    return kExitUsage;
  }
  config::Settings settings = config::merge(cfg, opts);
  std::string group_error;
  std::optional<gid_t> change_group = level_change_group(settings.level_changes, group_error);
  if (!group_error.empty()) {
    err(group_error);
    return kExitUsage;
  }
  std::error_code ec;
  std::string mnt = std::filesystem::absolute(a.mountpoint, ec).lexically_normal().string();
  if (mnt.size() > 1 && mnt.back() == '/') mnt.pop_back();
  int code = 0;
  if (std::string e = check_mountpoint(mnt, code); !e.empty()) {
    err(e);
    return code;
  }
  auto url = storage::parse_store_url(a.store);
  if (!url.ok()) {
    err(url.error().message);
    return kExitUsage;
  }
  std::string location = a.store;
  if (!url->remote()) {
    if (!std::filesystem::is_directory(a.store, ec)) {
      err(fmt::format("{}: store folder: {}", a.store, ec ? ec.message() : "not a directory"));
      return kExitUsage;
    }
    location = std::filesystem::absolute(a.store, ec).string();
  }
  // A remote source starts its transfer thread on first use, after the fork below.
  storage::StoreOptions open_options = store_options(settings);
  open_options.map_tables = true;
  auto opened = storage::open_store(location, open_options);
  if (!opened.ok()) {
    err(opened.error().message);
    return kExitRuntime;
  }
  std::unique_ptr<index::Store> store = std::move(opened->store);
  if (!store->tables_problem().empty())
    err(fmt::format("warning: {} (the store's tables stay in the daemon's memory)", store->tables_problem()));
  storage::RecordSource& source = *opened->source;
  for (const auto& p : source.problems()) err(fmt::format("warning: {} (its files will return EIO)", p));
  try {
    config::check_levels(settings, store->levels());
  } catch (const config::ConfigError& e) {
    err(e.what());
    return kExitUsage;
  }

  fs::ServeRequest req;
  req.mountpoint = mnt;
  req.debug = a.debug;
  req.level_change_group = change_group;
  bool foreground = a.foreground || a.debug;

  if (foreground) {
    auto sink = settings.log_file.empty() ? core::LogSink::stderr_ : core::LogSink::file;
    if (Status logging = core::log_open(settings.log_level, sink, settings.log_file); !logging.ok()) {
      err(logging.error().message);
      return kExitUsage;
    }
    std::string gpu_error;
    auto decoder = open_l3_decoder(settings, *store, gpu_error);
    if (!gpu_error.empty()) {
      err(gpu_error);
      return kExitUsage;
    }
    req.l3_decoder = decoder.get();
    bool failed = false;
    Status served = fs::serve(*store, source, settings, req, [&](const std::string& error) {
      if (!error.empty()) {
        failed = true;
        err(error);
      }
    });
    if (!served.ok() && !failed) err(served.error().message);
    return !served.ok() || failed ? kExitRuntime : kExitOk;
  }

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    err(fmt::format("pipe: {}", std::strerror(errno)));
    return kExitRuntime;
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    err(fmt::format("fork: {}", std::strerror(errno)));
    return kExitRuntime;
  }
  if (pid > 0) {  // parent: wait for "ready" or the child's error
    ::close(pipefd[1]);
    std::string msg;
    char buf[512];
    for (;;) {
      ssize_t n = ::read(pipefd[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      msg.append(buf, static_cast<size_t>(n));
    }
    ::close(pipefd[0]);
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

  // child: the daemon
  ::close(pipefd[0]);
  ::setsid();
  if (::chdir("/") != 0) {
  }
  auto sink = settings.log_file.empty() ? core::LogSink::syslog : core::LogSink::file;
  if (Status logging = core::log_open(settings.log_level, sink, settings.log_file); !logging.ok()) {
    std::string m = "E" + logging.error().message;
    ssize_t w = ::write(pipefd[1], m.data(), m.size());
    (void)w;
    ::_exit(kExitRuntime);
  }
  std::string gpu_error;
  auto decoder = open_l3_decoder(settings, *store, gpu_error);
  if (!gpu_error.empty()) {
    std::string m = "U" + gpu_error;
    ssize_t w = ::write(pipefd[1], m.data(), m.size());
    (void)w;
    ::_exit(kExitUsage);
  }
  req.l3_decoder = decoder.get();
  std::mutex mu;
  int wfd = pipefd[1];
  Status served = fs::serve(*store, source, settings, req, [&](const std::string& error) {
    std::lock_guard lock(mu);
    if (wfd < 0) return;
    std::string m = error.empty() ? std::string("OK") : "E" + error;
    ssize_t w = ::write(wfd, m.data(), m.size());
    (void)w;
    ::close(wfd);
    wfd = -1;
    if (error.empty()) {  // detach from the terminal once the parent has its answer
      int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        if (null > 2) ::close(null);
      }
    }
  });
  if (!served.ok()) core::log_error("{}", served.error().message);
  ::_exit(served.ok() ? kExitOk : kExitRuntime);
}

}  // namespace

void register_mount(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("mount", "Mount a store as a read-only directory tree");
  auto a = std::make_shared<MountArgs>();
  cmd->add_option("STORE", a->store, "store folder, s3://BUCKET/PREFIX or http(s)://HOST/PATH")->required();
  cmd->add_option("MOUNTPOINT", a->mountpoint, "empty directory to mount on")->required();
  cmd->add_option("-o", a->options, mount_options_help())->allow_extra_args(false);
  cmd->add_option("--config", a->config, "YAML configuration file");
  cmd->add_flag("-f", a->foreground, "stay in the foreground");
  cmd->add_flag("-d", a->debug, "FUSE debug output (implies -f)");
  cmd->callback([a, &exit_code] { exit_code = run_mount(*a); });
}

}  // namespace fid::cli
