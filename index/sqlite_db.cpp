#include "index/sqlite_db.h"

#include <fmt/format.h>

#include "common/posix_io.h"

#include <cerrno>
#include <cstring>

namespace fid::index {

Result<std::unique_ptr<SqliteDb>> SqliteDb::open(const std::string& path, bool writable) {
  // An index to read comes from strangers: SQLite's open would wait forever on a FIFO.
  if (!writable)
    if (Result<Fd> regular = open_regular(path); !regular)
      return Error{EIO, fmt::format("cannot open index: {}", regular.error().message)};
  std::unique_ptr<SqliteDb> db(new SqliteDb(path));
  int flags = writable ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READONLY;
  flags |= SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db->db_, flags, nullptr) != SQLITE_OK) {
    std::string msg = db->db_ ? sqlite3_errmsg(db->db_) : "out of memory";
    return Error{EIO, fmt::format("{}: cannot open index: {}", path, msg)};  // ~SqliteDb closes it
  }
  sqlite3* h = db->db_;
  sqlite3_extended_result_codes(h, 1);
  // An index comes from strangers (a bucket someone else writes): its schema may hold views
  // (a recursive one never ends), triggers or functions with side effects. None of it runs.
  // (Read-only opens only: defensive mode also refuses journal_mode=OFF, which the packer's own
  // scratch databases use.)
  if (!writable) sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  // Nor may one value of it take the reader's memory: a generated column such as
  // zeroblob(900000000) would make every read of its row allocate that much. The largest values
  // an index holds are a skipped file's path and a note (docs/FORMAT.md), far below this.
  if (!writable) sqlite3_limit(h, SQLITE_LIMIT_LENGTH, kMaxIndexValueBytes);
  sqlite3_db_config(h, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_VIEW, 0, nullptr);
  sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, nullptr);
  sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  return db;
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

std::string SqliteDb::error_text() const {
  std::string msg = sqlite3_errmsg(db_);
  // SQLite's own words ("database or disk is full", "disk I/O error") do not say which system
  // error it was; users grep for the system's.
  const int code = sqlite3_extended_errcode(db_) & 0xff;
  if (code == SQLITE_FULL) msg += fmt::format(" ({})", std::strerror(ENOSPC));
  else if (code == SQLITE_TOOBIG) msg += fmt::format(" (a value over {} bytes, which no fidelityfs index holds)", kMaxIndexValueBytes);
  else if (code == SQLITE_IOERR && sqlite3_system_errno(db_) != 0)
    msg += fmt::format(" ({})", std::strerror(sqlite3_system_errno(db_)));
  return msg;
}

Error SqliteDb::error(std::string_view what) const {
  return Error{EIO, fmt::format("{}: {}: {}", path_, what, error_text())};
}

Status SqliteDb::exec(const char* sql) {
  char* err = nullptr;
  if (int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    std::string msg = (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR ? error_text()
                      : err                                                     ? err
                                                                                : "unknown error";
    sqlite3_free(err);
    return Error{EIO, fmt::format("{}: {}", path_, msg)};
  }
  return {};
}

Result<SqliteStatement> SqliteDb::prepare(const char* sql) const {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return error("bad index schema");
  }
  return SqliteStatement(*this, stmt);
}

Result<bool> SqliteDb::has_table(const char* name) const {
  Result<SqliteStatement> q = prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  if (!q) return std::move(q).error();
  q->bind(1, std::string_view(name));
  return q->step();
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

void SqliteStatement::bind(int i, int64_t v) { bound(sqlite3_bind_int64(stmt_, i, v)); }
void SqliteStatement::bind(int i, std::string_view text) {
  bound(sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
}
void SqliteStatement::bind_blob(int i, std::span<const uint8_t> blob) {
  // A zero-length blob must still be a blob, not NULL.
  static const uint8_t empty = 0;
  const void* p = blob.empty() ? &empty : blob.data();
  bound(sqlite3_bind_blob(stmt_, i, p, static_cast<int>(blob.size()), SQLITE_TRANSIENT));
}

Result<bool> SqliteStatement::step() {
  if (bind_rc_ != SQLITE_OK) return Error{EIO, fmt::format("{}: bind: {}", db_->path(), sqlite3_errstr(bind_rc_))};
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->error("query failed");
}

Status SqliteStatement::run() {
  for (;;) {
    Result<bool> row = step();
    if (!row) return std::move(row).error();
    if (!*row) break;
  }
  reset();
  return {};
}

void SqliteStatement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
}

std::string SqliteStatement::text(int col) const {
  auto* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

std::span<const uint8_t> SqliteStatement::blob(int col) const {
  auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, col));
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::span<const uint8_t>(p, static_cast<size_t>(n)) : std::span<const uint8_t>();
}

}  // namespace fid::index
