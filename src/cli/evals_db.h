// The evals database: one row per `hearth bench` run, in SQLite (default
// $XDG_CACHE_HOME/hearth/evals.sqlite). The main numbers are columns so they can be queried;
// `json` holds the whole run as `hearth bench --json` printed it. Writers may run
// concurrently (busy timeout; each write is one transaction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hearth::cli {

struct BenchRecord {
  int64_t id = 0;         // assigned by the database
  std::string timestamp;  // UTC, ISO 8601
  std::string commit;     // git describe of the build, or "unknown"
  std::string cpu_model;
  int64_t cpu_cores = 0;
  std::string isa;
  std::string model_path;
  std::string model_arch;
  int64_t model_params = 0;
  std::string model_dtype;
  int64_t threads = 0;
  int64_t prompt_tokens = 0;
  int64_t gen_tokens = 0;
  int64_t reps = 0;
  double load_seconds = 0;
  double prefill_tokens_per_second = 0;
  double ttft_seconds = 0;
  double decode_tokens_per_second = 0;
  int64_t peak_rss_bytes = 0;
  double bandwidth_bytes_per_second = 0;
  double bytes_per_token = 0;
  double roofline_tokens_per_second = 0;
  double roofline_fraction = 0;
  std::string json;
};

// $XDG_CACHE_HOME/hearth/evals.sqlite, else ~/.cache/hearth/evals.sqlite; InputError when
// neither variable is set.
std::string default_evals_db_path();

// Creates the file, its directories and the schema on first use; returns the row id.
// Throws FileError naming the path when the file is not a usable evals database.
int64_t record_bench_run(const std::string& path, const BenchRecord& run);

// The newest `limit` runs (0: all), newest first; empty when the file does not exist.
std::vector<BenchRecord> list_bench_runs(const std::string& path, int64_t limit);

}  // namespace hearth::cli
