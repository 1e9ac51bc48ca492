// Reads a list of files with N threads in a seeded random order (or the list's order), like a
// DataLoader's workers, and prints files/s and MB/s as one JSON line. Used by the benchmarks to
// time the mount and its baselines with the same reader. "read_bytes" is what this process made
// storage deliver while reading (/proc/self/io), for the baselines that read storage themselves.
// "cpu_us_per_file" is this process's user+sys time per file: on a warm run that is the
// kernel's cost of open/read/close, which wall time mixes with what a shared machine gives to
// others.
// --passes P reads the list P times (a new order each pass), so that a warm run, which takes
// milliseconds per pass, is long enough to time. With several lists, the passes take turns
// (list 1, list 2, ..., then again, the first list rotating), so that sources compared with each
// other meet the same moments of a noisy machine; one JSON line per list, in argument order.
// --direct opens every file with O_DIRECT (reads bypass the page cache, as the daemon's own):
// how fast the disk alone delivers the files.
// --ranges reads lines "PATH OFFSET LENGTH" instead of paths (scripts/bench/store_ranges.py): each
// range with one O_DIRECT pread, widened to 4 KiB sectors, from files opened once (as the daemon
// reads a store's records): what the disk delivers of exactly a mount's reads, without FUSE.
//   readbench LIST_FILE... [--threads N] [--seed S | --in-order] [--passes P] [--direct | --ranges]
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

unsigned long long read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  unsigned long long v = 0;
  while (io >> key >> v)
    if (key == "read_bytes:") return v;
  return 0;
}

// A byte range of an open file (--ranges).
struct Range {
  int fd;
  uint64_t offset, length;
};

struct Source {
  std::vector<std::string> paths;
  std::vector<Range> ranges;  // --ranges: read instead of paths
  std::map<std::string, fid::Fd> open_files;  // --ranges: each file once
  std::mt19937_64 rng;
  size_t files = 0;
  uint64_t bytes = 0, errors = 0;
  unsigned long long storage = 0;
  double seconds = 0, cpu = 0;
};

// One pass over `s` in a new order with `threads` readers; adds what it read and how long it took.
void read_pass(Source& s, unsigned threads, bool in_order, bool direct) {
  if (!in_order) {
    std::shuffle(s.paths.begin(), s.paths.end(), s.rng);
    std::shuffle(s.ranges.begin(), s.ranges.end(), s.rng);
  }
  const size_t count = s.ranges.empty() ? s.paths.size() : s.ranges.size();
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, errors{0};
  const unsigned long long rb0 = read_bytes();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      constexpr size_t kBuf = 1 << 20;  // page-aligned: O_DIRECT reads need it
      const std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(4096, kBuf)), &std::free);
      if (!buf) { errors++; return; }
      for (size_t i; (i = next++) < count;) {
        if (!s.ranges.empty()) {
          const Range& r = s.ranges[i];
          const uint64_t start = r.offset & ~uint64_t{4095}, end = (r.offset + r.length + 4095) & ~uint64_t{4095};
          const ssize_t n = end - start <= kBuf ? ::pread(r.fd, buf.get(), end - start, static_cast<off_t>(start)) : -1;
          if (n < 0 || static_cast<uint64_t>(n) < r.offset + r.length - start) errors++;
          else bytes += r.length;
          continue;
        }
        const fid::Fd fd(::open(s.paths[i].c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0)));
        if (fd.get() < 0) { errors++; continue; }
        ssize_t n;
        uint64_t got = 0;
        while ((n = ::read(fd.get(), buf.get(), kBuf)) > 0) got += static_cast<uint64_t>(n);
        if (n < 0) errors++;
        bytes += got;
      }
    });
  }
  for (auto& t : pool) t.join();
  s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.cpu += cpu_seconds() - cpu0;
  s.storage += read_bytes() - rb0;
  s.files += count;
  s.bytes += bytes.load();
  s.errors += errors.load();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> lists;
  unsigned threads = 2;
  uint64_t seed = 1;
  bool in_order = false, direct = false, ranges = false;
  unsigned passes = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (a == "--in-order") in_order = true;
    else if (a == "--direct") direct = true;
    else if (a == "--ranges") ranges = true;
    else if (a == "--passes" && i + 1 < argc) passes = std::max(1u, static_cast<unsigned>(std::stoul(argv[++i])));
    else if (a.starts_with("--")) { std::fprintf(stderr, "readbench: unknown argument %s\n", a.c_str()); return 2; }
    else lists.push_back(a);
  }
  if (lists.empty()) {
    std::fprintf(stderr, "usage: readbench LIST_FILE... [--threads N] [--seed S | --in-order] [--passes P] [--direct | --ranges]\n");
    return 2;
  }
  std::vector<Source> sources(lists.size());
  for (size_t k = 0; k < lists.size(); ++k) {
    std::ifstream list(lists[k]);
    if (!list) { std::fprintf(stderr, "readbench: cannot read %s\n", lists[k].c_str()); return 2; }
    Source& src = sources[k];
    for (std::string line; std::getline(list, line);) {
      if (line.empty()) continue;
      if (!ranges) {
        src.paths.push_back(line);
        continue;
      }
      std::istringstream words(line);
      std::string path;
      Range r{};
      if (!(words >> path >> r.offset >> r.length)) {
        std::fprintf(stderr, "readbench: %s: not \"PATH OFFSET LENGTH\": %s\n", lists[k].c_str(), line.c_str());
        return 2;
      }
      auto [it, added] = src.open_files.try_emplace(path);
      if (added) it->second = fid::Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
      if (it->second.get() < 0) {
        std::fprintf(stderr, "readbench: cannot open %s with O_DIRECT: %s\n", path.c_str(), std::strerror(errno));
        return 2;
      }
      r.fd = it->second.get();
      src.ranges.push_back(r);
    }
    sources[k].rng.seed(seed);  // every list gets the same sequence of shuffles
  }
  for (unsigned p = 0; p < passes; ++p)
    for (size_t j = 0; j < sources.size(); ++j) read_pass(sources[(p + j) % sources.size()], threads, in_order, direct);
  bool failed = false;
  for (const auto& s : sources) {
    std::printf("{\"files\": %zu, \"bytes\": %llu, \"errors\": %llu, \"seconds\": %.4f, \"files_per_s\": %.1f, \"mb_per_s\": %.2f, \"read_bytes\": %llu, \"cpu_us_per_file\": %.3f}\n",
                s.files, static_cast<unsigned long long>(s.bytes), static_cast<unsigned long long>(s.errors), s.seconds,
                static_cast<double>(s.files) / s.seconds, static_cast<double>(s.bytes) / 1e6 / s.seconds, s.storage,
                s.cpu * 1e6 / static_cast<double>(s.files));
    failed = failed || s.errors != 0;
  }
  return failed ? 1 : 0;
}
