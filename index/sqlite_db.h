// Minimal RAII over the SQLite C API for the index (writer at pack time, loader at mount time).
// Nothing here throws: a failing SQLite call is an Error (EIO) whose message names the file, what
// failed and SQLite's reason; callers put their own errno and words in front.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"

namespace fid::index {

class SqliteStatement;

// The largest value (text or blob) a read-only open reads; a larger one fails its query.
inline constexpr int kMaxIndexValueBytes = 1 << 20;

class SqliteDb {
 public:
  // The error names the file ("<path>: cannot open index: ...").
  static Result<std::unique_ptr<SqliteDb>> open(const std::string& path, bool writable);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  Status exec(const char* sql);
  // "<path>: bad index schema: ..." when SQLite cannot prepare it.
  Result<SqliteStatement> prepare(const char* sql) const;
  // Whether the database has a table `name` (an optional one, such as videos).
  Result<bool> has_table(const char* name) const;
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  // "<path>: <what>: <error_text()>", EIO.
  Error error(std::string_view what) const;
  // The last error in SQLite's words, with the system's cause when there is one (ENOSPC, EIO).
  std::string error_text() const;

 private:
  explicit SqliteDb(std::string path) : path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::string path_;
};

class SqliteStatement {
 public:
  ~SqliteStatement();
  SqliteStatement(SqliteStatement&& o) noexcept
      : db_(o.db_), stmt_(o.stmt_), bind_rc_(o.bind_rc_) { o.stmt_ = nullptr; }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  // A bind that fails is reported by the step() or run() that follows ("<path>: bind: ...").
  void bind(int i, int64_t v);
  void bind(int i, std::string_view text);
  void bind_blob(int i, std::span<const uint8_t> blob);
  // True while a row is available, false once done; "<path>: query failed: ..." on failure.
  Result<bool> step();
  // Calls fn() (returning Status) at every row until it fails: its error, or a failing step's.
  template <class Fn>
  Status each_row(Fn&& fn) {
    for (;;) {
      Result<bool> row = step();
      if (!row) return std::move(row).error();
      if (!*row) return {};
      if (Status s = fn(); !s) return s;
    }
  }
  // Runs an INSERT/UPDATE to completion and resets for reuse.
  Status run();
  void reset();

  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string text(int col) const;
  std::span<const uint8_t> blob(int col) const;

 private:
  friend class SqliteDb;
  SqliteStatement(const SqliteDb& db, sqlite3_stmt* stmt) : db_(&db), stmt_(stmt) {}
  void bound(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  const SqliteDb* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = SQLITE_OK;  // the first failed bind's since the last reset
};

}  // namespace fid::index
