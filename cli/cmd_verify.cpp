#include <atomic>
#include <chrono>
#include <fmt/format.h>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/progress.h"
#include "codec/jpeg.h"
#include "codec/l3_view.h"
#include "index/store.h"

namespace fid::cli {

namespace {

// Checks one file: every piece's checksum, and for a JPEG a strict decode at every level.
std::string verify_file(const index::Store& store, const index::File& f, std::vector<uint8_t>& buf) {
  auto pieces = store.pieces(f);
  buf.clear();
  std::vector<size_t> ends;
  for (uint32_t i = 0; i < pieces.size(); ++i) {
    size_t at = buf.size();
    buf.resize(at + pieces[i].size);
    if (int rc = store.read_piece(f, i, {buf.data() + at, pieces[i].size}); rc != 0)
      return fmt::format("piece {} unreadable: {}", i, rc == -EIO ? "checksum mismatch or I/O error" : std::strerror(-rc));
    ends.push_back(buf.size());
  }
  if (f.kind == index::FileKind::l3) {  // a full decode of the L3 bitstream
    fid::Result<codec::L3Payload> parsed = codec::parse_l3_payload(buf);
    if (!parsed) return "L3 payload: " + parsed.error().message;
    const codec::L3Payload& p = *parsed;
    if (p.shape.width != f.width || p.shape.height != f.height || codec::shape_code(p.shape) != f.script)
      return fmt::format("L3 payload is {}x{} mode {}, the index disagrees", p.shape.width, p.shape.height,
                         codec::pil_mode_name(p.shape.mode));
    thread_local std::vector<uint8_t> pixels;
    pixels.resize(size_t{p.shape.width} * p.shape.height * p.shape.channels());
    if (fid::Status decoded = codec::l3_decode_into(p.l3, pixels); !decoded)
      return "L3 does not decode: " + decoded.error().message;
    return {};
  }
  if (f.kind != index::FileKind::jpeg) return {};
  std::vector<uint8_t> file;
  for (int k = 1; k <= store.levels(); ++k) {
    size_t n = ends[static_cast<size_t>(k)];
    file.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    file.insert(file.end(), codec::kEoi.begin(), codec::kEoi.end());
    fid::Result<codec::DecodedImage> decoded = codec::decode_jpeg_strict(file);
    if (!decoded) return fmt::format("level {} does not decode: {}", k, decoded.error().message);
    const codec::DecodedImage& img = *decoded;
    if (static_cast<uint32_t>(img.width) != f.width || static_cast<uint32_t>(img.height) != f.height)
      return fmt::format("level {} decodes to {}x{}, index says {}x{}", k, img.width, img.height, f.width, f.height);
  }
  return {};
}

int run_verify(const std::string& dir, unsigned jobs, const std::string& progress_mode) {
  std::unique_ptr<index::Store> store;
  try {
    store = index::Store::open(dir);
  } catch (const index::StoreError& e) {
    fmt::print(stderr, "fidelityfs verify: {}\n", e.what());
    return kExitRuntime;
  }
  auto files = store->files();
  std::atomic<size_t> next{0}, done{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> bad;
  if (jobs == 0) jobs = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < jobs; ++t) {
    workers.emplace_back([&] {
      std::vector<uint8_t> buf;
      for (size_t i; (i = next++) < files.size();) {
        std::string why = verify_file(*store, files[i], buf);
        bytes += buf.size();
        if (!why.empty()) {
          std::lock_guard lock(mu);
          bad.emplace_back(store->relative_path(files[i]), why);
        }
        done++;
      }
    });
  }
  ProgressLine line(parse_progress_mode(progress_mode), "verify");
  auto t0 = std::chrono::steady_clock::now();
  while (done < files.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // progress refresh period
    line.update(done, files.size(), bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& w : workers) w.join();
  line.finish();
  std::sort(bad.begin(), bad.end());
  for (const std::string& p : store->problems()) fmt::print(stderr, "damaged record: {}\n", p);
  for (auto& [path, why] : bad) fmt::print(stderr, "BAD {}: {}\n", path, why);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("verified {} files, {} bad, {:.1f}s\n", files.size(), bad.size(), secs);
  return bad.empty() && store->problems().empty() ? kExitOk : kExitRuntime;
}

}  // namespace

void register_verify(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("verify", "Check every checksum and decode every JPEG at every level");
  auto dir = std::make_shared<std::string>();
  auto jobs = std::make_shared<unsigned>(0);
  auto progress = std::make_shared<std::string>("auto");
  cmd->add_option("STORE_DIR", *dir, "store folder")->required();
  cmd->add_option("--jobs", *jobs, "worker threads (default: all cores)");
  cmd->add_option("--progress", *progress, "progress line: auto, on, off")->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->callback([dir, jobs, progress, &exit_code] { exit_code = run_verify(*dir, *jobs, *progress); });
}

}  // namespace fid::cli
