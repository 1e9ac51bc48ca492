// Reads a list of files with N threads in a seeded random order (or the list's order), like a
// DataLoader's workers, and prints files/s and MB/s as one JSON line. Used by the benchmarks to
// time the mount and its baselines with the same reader. "read_bytes" is what this process made
// storage deliver while reading (/proc/self/io), for the baselines that read storage themselves.
// --passes P reads the list P times (a new order each pass), so that a warm run, which takes
// milliseconds per pass, is long enough to time. "cpu_us_per_file" is this process's user+sys
// time per file: on a warm run that is the kernel's cost of open/read/close, which unlike wall
// time does not count the time a shared machine gives to others.
//   readbench LIST_FILE [--threads N] [--seed S | --in-order] [--passes P]
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

static double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

static unsigned long long read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  unsigned long long v = 0;
  while (io >> key >> v)
    if (key == "read_bytes:") return v;
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: readbench LIST_FILE [--threads N] [--seed S | --in-order] [--passes P]\n");
    return 2;
  }
  unsigned threads = 2;
  uint64_t seed = 1;
  bool in_order = false;
  unsigned passes = 1;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (a == "--in-order") in_order = true;
    else if (a == "--passes" && i + 1 < argc) passes = std::max(1u, static_cast<unsigned>(std::stoul(argv[++i])));
    else { std::fprintf(stderr, "readbench: unknown argument %s\n", a.c_str()); return 2; }
  }
  std::vector<std::string> paths;
  std::ifstream list(argv[1]);
  for (std::string line; std::getline(list, line);)
    if (!line.empty()) paths.push_back(line);
  const size_t files = paths.size();
  std::vector<std::string> order;  // every pass's order, one after the other
  order.reserve(files * passes);
  std::mt19937_64 rng(seed);
  for (unsigned p = 0; p < passes; ++p) {
    if (!in_order) std::shuffle(paths.begin(), paths.end(), rng);
    order.insert(order.end(), paths.begin(), paths.end());
  }
  paths = std::move(order);
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, errors{0};
  const unsigned long long rb0 = read_bytes();
  const double cpu0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<char> buf(1 << 20);
      for (size_t i; (i = next++) < paths.size();) {
        int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) { errors++; continue; }
        ssize_t n;
        uint64_t got = 0;
        while ((n = ::read(fd, buf.data(), buf.size())) > 0) got += static_cast<uint64_t>(n);
        if (n < 0) errors++;
        ::close(fd);
        bytes += got;
      }
    });
  }
  for (auto& t : pool) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  const unsigned long long rb = read_bytes() - rb0;
  std::printf("{\"files\": %zu, \"bytes\": %llu, \"errors\": %llu, \"seconds\": %.4f, \"files_per_s\": %.1f, \"mb_per_s\": %.2f, \"read_bytes\": %llu, \"cpu_us_per_file\": %.3f}\n",
              paths.size(), static_cast<unsigned long long>(bytes.load()), static_cast<unsigned long long>(errors.load()),
              s, static_cast<double>(paths.size()) / s, static_cast<double>(bytes.load()) / 1e6 / s, rb,
              cpu * 1e6 / static_cast<double>(paths.size()));
  return errors ? 1 : 0;
}
