// Store::pack_notes: what pack said about the source (each blob's reason, each skipped entry's),
// read from the index on demand: inspect shows them, a mount never needs them.
#include <cerrno>
#include <fmt/format.h>

#include "index/sqlite_db.h"
#include "index/store.h"

namespace fid::index {

namespace {

Error unreadable(const Error& e) { return Error{EINVAL, e.message}; }

}  // namespace

Result<Store::PackNotes> Store::pack_notes(const std::filesystem::path& index_file, size_t limit) const {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::open(index_file.string(), /*writable=*/false);
  if (!db) return unreadable(db.error());
  PackNotes notes;
  Result<SqliteStatement> blobs = (*db)->prepare("SELECT id, note FROM files WHERE kind = 2 ORDER BY id");
  if (!blobs) return unreadable(blobs.error());
  Status read = blobs->each_row([&]() -> Status {
    const int64_t id = blobs->integer(0);
    if (id < 0 || static_cast<uint64_t>(id) >= files().size()) return {};  // not a file this store loaded
    if (++notes.blob_count <= limit) notes.blobs.emplace_back(relative_path(files()[static_cast<size_t>(id)]), blobs->text(1));
    return {};
  });
  if (!read) return unreadable(read.error());
  Result<SqliteStatement> skipped = (*db)->prepare("SELECT path, reason FROM skipped");
  if (!skipped) return unreadable(skipped.error());
  read = skipped->each_row([&]() -> Status {
    if (++notes.skipped_count > limit) return {};
    const auto path = skipped->blob(0);
    notes.skipped.emplace_back(std::string(path.begin(), path.end()), skipped->text(1));
    return {};
  });
  if (!read) return unreadable(read.error());
  return notes;
}

}  // namespace fid::index
