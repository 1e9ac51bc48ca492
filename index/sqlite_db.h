// Minimal RAII over the SQLite C API for the index (writer at pack time, loader at mount time).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "index/store.h"

namespace fid::index {

// Inside index/ only: what a failing SQLite call or a corrupt index throws. Store::open and pack
// catch it at their boundary and return a fid::Error with the same message.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SqliteStatement;

// The largest value (text or blob) a read-only open reads; a larger one fails its query.
inline constexpr int kMaxIndexValueBytes = 1 << 20;

class SqliteDb {
 public:
  // Throws StoreError naming the file on failure.
  SqliteDb(const std::string& path, bool writable);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  void exec(const char* sql);
  SqliteStatement prepare(const char* sql);
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(std::string_view what) const;
  // The last error in SQLite's words, with the system's cause when there is one (ENOSPC, EIO).
  std::string error_text() const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class SqliteStatement {
 public:
  SqliteStatement(const SqliteDb& db, const char* sql);
  ~SqliteStatement();
  SqliteStatement(SqliteStatement&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  void bind(int i, int64_t v);
  void bind(int i, std::string_view text);
  void bind_blob(int i, std::span<const uint8_t> blob);
  // Returns true while a row is available.
  bool step();
  // Runs an INSERT/UPDATE to completion and resets for reuse.
  void run();
  void reset();

  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string text(int col) const;
  std::span<const uint8_t> blob(int col) const;

 private:
  const SqliteDb* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace fid::index
