#include "cli/evals_db.h"

#include <sqlite3.h>

#include <filesystem>

#include "base/error.h"
#include "base/knobs.h"

namespace hearth::cli {
namespace {

constexpr int kSchemaVersion = 1;
constexpr int kBusyTimeoutMs = 30000;

// Version 1. Later versions migrate from here inside the write transaction.
constexpr const char* kSchema = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE bench_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  timestamp TEXT NOT NULL,
  hearth_commit TEXT NOT NULL,
  cpu_model TEXT NOT NULL,
  cpu_cores INTEGER NOT NULL,
  isa TEXT NOT NULL,
  model_path TEXT NOT NULL,
  model_arch TEXT NOT NULL,
  model_params INTEGER NOT NULL,
  model_dtype TEXT NOT NULL,
  threads INTEGER NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  gen_tokens INTEGER NOT NULL,
  reps INTEGER NOT NULL,
  load_seconds REAL NOT NULL,
  prefill_tokens_per_second REAL NOT NULL,
  ttft_seconds REAL NOT NULL,
  decode_tokens_per_second REAL NOT NULL,
  peak_rss_bytes INTEGER NOT NULL,
  bandwidth_bytes_per_second REAL NOT NULL,
  bytes_per_token REAL NOT NULL,
  roofline_tokens_per_second REAL NOT NULL,
  roofline_fraction REAL NOT NULL,
  json TEXT NOT NULL
);
)sql";

constexpr const char* kColumns =
    "timestamp, hearth_commit, cpu_model, cpu_cores, isa, model_path, model_arch, model_params, model_dtype, "
    "threads, prompt_tokens, gen_tokens, reps, load_seconds, prefill_tokens_per_second, ttft_seconds, "
    "decode_tokens_per_second, peak_rss_bytes, bandwidth_bytes_per_second, bytes_per_token, "
    "roofline_tokens_per_second, roofline_fraction, json";

class Db {
 public:
  Db(const std::string& path, int flags) : path_(path) {
    const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) fail("cannot open the evals database");
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  [[noreturn]] void fail(const std::string& what) const {
    throw FileError(path_, what + ": " + (db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory"));
  }
  void exec(const char* sql, const std::string& what) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(what);
  }
  sqlite3* get() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  Statement(const Db& db, const std::string& sql, const std::string& what) : db_(db), what_(what) {
    if (sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) db.fail(what);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // True while there is a row.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) db_.fail(what_);
    return false;
  }
  void bind(int i, const std::string& v) { sqlite3_bind_text(stmt_, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  std::string text(int i) const {
    const auto* p = sqlite3_column_text(stmt_, i);
    return p != nullptr ? reinterpret_cast<const char*>(p) : "";
  }
  int64_t integer(int i) const { return sqlite3_column_int64(stmt_, i); }
  double real(int i) const { return sqlite3_column_double(stmt_, i); }

 private:
  const Db& db_;
  std::string what_;
  sqlite3_stmt* stmt_ = nullptr;
};

int64_t count(const Db& db, const std::string& sql, const std::string& what) {
  Statement s(db, sql, what);
  return s.step() ? s.integer(0) : 0;
}

// 0 for a database without tables (new); the schema version otherwise. FileError for a
// database that is not ours or is from a newer Hearth.
int schema_version(const Db& db, const std::string& path, const std::string& what) {
  if (count(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", what) == 0) return 0;
  if (count(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'", what) == 0)
    throw FileError(path, "not a Hearth evals database (no schema_version table)");
  const int64_t v = count(db, "SELECT max(version) FROM schema_version", what);
  if (v != kSchemaVersion) {
    throw FileError(path, "evals database schema version " + std::to_string(v) + "; this Hearth reads version " +
                              std::to_string(kSchemaVersion));
  }
  return static_cast<int>(v);
}

}  // namespace

std::string default_evals_db_path() {
  const std::string dir = knobs::cache_dir();
  if (dir.empty()) throw InputError("no cache directory: set XDG_CACHE_HOME or HOME, or pass --db");
  return dir + "/evals.sqlite";
}

int64_t record_bench_run(const std::string& path, const BenchRecord& r) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) throw FileError(parent.string(), "cannot create directory: " + ec.message());

  Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const std::string what = "cannot record the run";
  // IMMEDIATE takes the write lock up front, so two first writers cannot both create the schema.
  db.exec("BEGIN IMMEDIATE", what);
  try {
    if (schema_version(db, path, what) == 0) {
      db.exec(kSchema, what);
      db.exec(("INSERT INTO schema_version (version) VALUES (" + std::to_string(kSchemaVersion) + ")").c_str(), what);
    }
    Statement s(db,
                std::string("INSERT INTO bench_runs (") + kColumns +
                    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                what);
    int i = 0;
    s.bind(++i, r.timestamp);
    s.bind(++i, r.commit);
    s.bind(++i, r.cpu_model);
    s.bind(++i, r.cpu_cores);
    s.bind(++i, r.isa);
    s.bind(++i, r.model_path);
    s.bind(++i, r.model_arch);
    s.bind(++i, r.model_params);
    s.bind(++i, r.model_dtype);
    s.bind(++i, r.threads);
    s.bind(++i, r.prompt_tokens);
    s.bind(++i, r.gen_tokens);
    s.bind(++i, r.reps);
    s.bind(++i, r.load_seconds);
    s.bind(++i, r.prefill_tokens_per_second);
    s.bind(++i, r.ttft_seconds);
    s.bind(++i, r.decode_tokens_per_second);
    s.bind(++i, r.peak_rss_bytes);
    s.bind(++i, r.bandwidth_bytes_per_second);
    s.bind(++i, r.bytes_per_token);
    s.bind(++i, r.roofline_tokens_per_second);
    s.bind(++i, r.roofline_fraction);
    s.bind(++i, r.json);
    s.step();
    const int64_t id = sqlite3_last_insert_rowid(db.get());
    db.exec("COMMIT", what);
    return id;
  } catch (...) {
    sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<BenchRecord> list_bench_runs(const std::string& path, int64_t limit) {
  if (!std::filesystem::exists(path)) return {};
  Db db(path, SQLITE_OPEN_READONLY);
  const std::string what = "cannot read the evals database";
  if (schema_version(db, path, what) == 0) return {};
  Statement s(db, std::string("SELECT id, ") + kColumns + " FROM bench_runs ORDER BY id DESC LIMIT ?", what);
  s.bind(1, limit > 0 ? limit : int64_t{-1});
  std::vector<BenchRecord> out;
  while (s.step()) {
    BenchRecord r;
    int i = 0;
    r.id = s.integer(i++);
    r.timestamp = s.text(i++);
    r.commit = s.text(i++);
    r.cpu_model = s.text(i++);
    r.cpu_cores = s.integer(i++);
    r.isa = s.text(i++);
    r.model_path = s.text(i++);
    r.model_arch = s.text(i++);
    r.model_params = s.integer(i++);
    r.model_dtype = s.text(i++);
    r.threads = s.integer(i++);
    r.prompt_tokens = s.integer(i++);
    r.gen_tokens = s.integer(i++);
    r.reps = s.integer(i++);
    r.load_seconds = s.real(i++);
    r.prefill_tokens_per_second = s.real(i++);
    r.ttft_seconds = s.real(i++);
    r.decode_tokens_per_second = s.real(i++);
    r.peak_rss_bytes = s.integer(i++);
    r.bandwidth_bytes_per_second = s.real(i++);
    r.bytes_per_token = s.real(i++);
    r.roofline_tokens_per_second = s.real(i++);
    r.roofline_fraction = s.real(i++);
    r.json = s.text(i++);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hearth::cli
