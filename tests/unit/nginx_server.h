// A real HTTP server for tests of the remote read path: Debian's nginx serving a folder on
// 127.0.0.1 (a free port), with its configuration, logs, temporary files and pid file in a
// temporary folder of its own. It runs in the foreground as our child; stop() ends it by the
// pid we recorded. Tests skip when /usr/sbin/nginx is missing.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "test_files.h"

namespace fid::testutil {

class NginxServer {
 public:
  static constexpr const char* kBinary = "/usr/sbin/nginx";
  static bool available() { return ::access(kBinary, X_OK) == 0; }

  // Serves `root` (read-only); throws when nginx does not come up within 10 s.
  explicit NginxServer(std::filesystem::path root) : root_(std::move(root)) {
    for (int tries = 0; tries < 5 && pid_ < 0; ++tries) start(free_port());  // a port can be taken in between
    if (pid_ < 0) throw std::runtime_error("nginx did not start: " + log_tail());
  }
  ~NginxServer() { stop(); }
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::filesystem::path access_log() const { return dir_.path() / "access.log"; }
  std::string read_access_log() const {
    std::ifstream in(access_log());
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Ends nginx (fast shutdown) and reaps it; the port then refuses connections.
  void stop() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  static uint16_t free_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(s);
    return ntohs(a.sin_port);
  }

  static bool answers(uint16_t port) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    return ok;
  }

  std::string log_tail() const {
    std::ifstream in(dir_.path() / "error.log");
    std::stringstream s;
    s << in.rdbuf();
    std::string t = s.str();
    return t.size() > 2000 ? t.substr(t.size() - 2000) : t;
  }

  void start(uint16_t port) {
    const auto d = dir_.path().string();
    {
      std::ofstream conf(dir_.path() / "nginx.conf", std::ios::trunc);
      if (::geteuid() == 0) conf << "user root;\n";  // workers must read the test's files
      conf << "daemon off;\nworker_processes 1;\npid " << d << "/nginx.pid;\nerror_log " << d << "/error.log;\n"
           << "events { worker_connections 1024; }\n"
           << "http {\n  access_log " << d << "/access.log;\n"
           << "  client_body_temp_path " << d << "/client;\n  proxy_temp_path " << d << "/proxy;\n"
           << "  fastcgi_temp_path " << d << "/fastcgi;\n  uwsgi_temp_path " << d << "/uwsgi;\n"
           << "  scgi_temp_path " << d << "/scgi;\n  keepalive_requests 100000;\n"
           << "  server {\n    listen 127.0.0.1:" << port << ";\n    root " << root_.string() << ";\n  }\n}\n";
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl(kBinary, kBinary, "-p", d.c_str(), "-e", (d + "/error.log").c_str(), "-c", (d + "/nginx.conf").c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Poll until it accepts connections, or has exited (port taken), or 10 s have passed.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (answers(port)) {
        pid_ = pid;
        port_ = port;
        return;
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return;  // exited: try another port
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }

  std::filesystem::path root_;
  TempDir dir_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

}  // namespace fid::testutil
