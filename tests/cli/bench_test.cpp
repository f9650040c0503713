// hearth bench and hearth evals on the tiny model: every field present, typed and positive
// (never a wall-time assertion), runs recorded in and listed from the evals database, and
// clear one-line errors for bad flags and a corrupt database.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Small and fast: the probe buffer is the one flag here that is not in the brief's command.
const char* const kQuick = " --prompt-tokens 16 --gen-tokens 8 --reps 1 --bandwidth-mib 64";

void expect_positive(const json& j, const std::string& key) {
  ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
  ASSERT_TRUE(j[key].is_number()) << key << " = " << j[key].dump();
  const double v = j[key].get<double>();
  EXPECT_TRUE(std::isfinite(v) && v > 0) << key << " = " << v;
}

void expect_text(const json& j, const std::string& key) {
  ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
  ASSERT_TRUE(j[key].is_string()) << key << " = " << j[key].dump();
  EXPECT_FALSE(j[key].get<std::string>().empty()) << key;
}

json bench_json(const std::string& model, const std::string& db) {
  int status = 0;
  std::string err;
  const std::string out = testing::run_hearth("bench " + model + kQuick + " --json --db " + db, &status, &err);
  EXPECT_EQ(status, 0) << err;
  return json::parse(out);
}

json evals_json(const std::string& db) {
  int status = 0;
  std::string err;
  const std::string out = testing::run_hearth("evals --json --db " + db, &status, &err);
  EXPECT_EQ(status, 0) << err;
  return json::parse(out);
}

void expect_one_line_error(int status, const std::string& err, const std::string& needle) {
  EXPECT_EQ(status, 1) << err;
  EXPECT_EQ(err.rfind("hearth: error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << err;
}

TEST(cli_bench, JsonHasEveryFieldAndIsRecorded) {
  const auto model = testing::make_tiny_model_dir();
  const testing::TempDir tmp;
  const std::string db = tmp.file("cache/evals.sqlite");  // the directory does not exist yet
  const json j = bench_json(model->path(), db);

  expect_text(j, "timestamp");
  expect_text(j, "hearth_commit");
  for (const char* k :
       {"load_seconds", "prefill_tokens_per_second", "ttft_seconds", "decode_tokens_per_second", "peak_rss_bytes"})
    expect_positive(j, k);
  expect_text(j["machine"], "cpu_model");
  expect_text(j["machine"], "isa");
  expect_text(j["machine"], "kernel_isa");
  expect_positive(j["machine"], "cpu_cores");
  expect_text(j["model"], "path");
  EXPECT_EQ(j["model"]["arch"], "qwen3");
  EXPECT_EQ(j["model"]["dtype"], "f32");
  for (const char* k : {"params", "file_bytes", "n_layers", "hidden", "vocab_size"}) expect_positive(j["model"], k);
  EXPECT_EQ(j["settings"]["prompt_tokens"], 16);
  EXPECT_EQ(j["settings"]["gen_tokens"], 8);
  EXPECT_EQ(j["settings"]["reps"], 1);
  expect_positive(j["settings"], "threads");
  for (const char* k : {"bytes_per_second", "buffer_bytes", "passes", "threads"}) expect_positive(j["bandwidth"], k);
  expect_text(j["bandwidth"], "isa");
  EXPECT_EQ(j["bandwidth"]["threads"], j["settings"]["threads"]);
  for (const char* k :
       {"weight_bytes_per_token", "kv_bytes_per_token", "mean_context", "bytes_per_token", "tokens_per_second"})
    expect_positive(j["roofline"], k);
  expect_positive(j["roofline"], "decode_fraction");
  // The tiny model's weights sit in L2, so its decode is not bound by DRAM at all, and when the
  // machine is busy (ctest -j) the probe can lose more than decode does: this bound only catches
  // unit slips. The arithmetic itself is checked exactly below, without timing.
  EXPECT_LE(j["roofline"]["decode_fraction"].get<double>(), 10.0);
  ASSERT_EQ(j["runs"].size(), 1u);

  // The roofline from its parts. The tiny model is f32 and untied: per token the forward reads
  // every tensor but the embedding, one embedding row, and K+V of 2 layers x 2 heads x 32 dims
  // (f32) at the mean context of 16 + 8/2 positions.
  const json& rf = j["roofline"];
  const double file_bytes = j["model"]["file_bytes"].get<double>();
  const double embed = 1000 * 64 * 4, row = 64 * 4;
  EXPECT_EQ(rf["weight_bytes_per_token"].get<double>(), file_bytes - embed + row);
  EXPECT_EQ(rf["mean_context"].get<double>(), 20.0);
  EXPECT_EQ(rf["kv_bytes_per_token"].get<double>(), 20.0 * 2 * 2 * 2 * 32 * 4);
  EXPECT_DOUBLE_EQ(rf["bytes_per_token"].get<double>(),
                   rf["weight_bytes_per_token"].get<double>() + rf["kv_bytes_per_token"].get<double>());
  EXPECT_DOUBLE_EQ(rf["tokens_per_second"].get<double>(),
                   j["bandwidth"]["bytes_per_second"].get<double>() / rf["bytes_per_token"].get<double>());
  EXPECT_DOUBLE_EQ(rf["decode_fraction"].get<double>(),
                   j["decode_tokens_per_second"].get<double>() / rf["tokens_per_second"].get<double>());
  EXPECT_EQ(j["model"]["params"].get<double>(), file_bytes / 4);

  const json runs = evals_json(db);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["id"], 1);
  json stored = runs[0];
  stored.erase("id");
  EXPECT_EQ(stored, j);

  bench_json(model->path(), db);
  const json two = evals_json(db);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]["id"], 2);  // newest first
  EXPECT_EQ(two[1]["id"], 1);

  int status = 0;
  const std::string table = testing::run_hearth("evals --db " + db, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3) << table;  // header + 2 runs
  EXPECT_NE(table.find("qwen3"), std::string::npos) << table;
  EXPECT_EQ(evals_json(db + "x"), json::array());  // no database yet: no runs
  const json one = json::parse(testing::run_hearth("evals --json --limit 1 --db " + db, &status));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["id"], 2);
}

TEST(cli_bench, TableAndNoRecord) {
  const auto model = testing::make_tiny_model_dir();
  const testing::TempDir tmp;
  int status = 0;
  std::string err;
  const std::string out = testing::run_hearth(
      "bench " + model->path() + kQuick + " --no-record --db " + tmp.file("e.sqlite"), &status, &err);
  EXPECT_EQ(status, 0) << err;
  for (const char* row : {"pp16", "tg8", "ttft", "bandwidth", "roofline", "peak RSS"})
    EXPECT_NE(out.find(row), std::string::npos) << row << " missing in:\n" << out;
  EXPECT_FALSE(fs::exists(tmp.file("e.sqlite")));
}

// --probe-every 2 over 8 tokens and 2 runs: the first run probes after tokens 2, 4 and 6 and
// after the run (4); the second also before it (5). Each run's bandwidth is its probes' median,
// and the peak RSS is still measured (without the probe's buffer).
TEST(cli_bench, ProbesDuringTheDecode) {
  const auto model = testing::make_tiny_model_dir();
  int status = 0;
  std::string err;
  const std::string out = testing::run_hearth("bench " + model->path() +
                                                  " --prompt-tokens 16 --gen-tokens 8 --reps 2 --bandwidth-mib 64"
                                                  " --probe-every 2 --json --no-record",
                                              &status, &err);
  ASSERT_EQ(status, 0) << err;
  const json j = json::parse(out);
  EXPECT_EQ(j["settings"]["probe_every"], 2);
  EXPECT_EQ(j["bandwidth"]["probes_per_run"], 5);
  expect_positive(j, "peak_rss_bytes");
  expect_positive(j["bandwidth"], "bytes_per_second");
  for (const json& r : j["runs"]) expect_positive(r, "decode_fraction");
  // The same as without probes during the run, give or take: far from the 64 MiB buffer.
  const std::string plain =
      testing::run_hearth("bench " + model->path() + kQuick + " --json --no-record", &status, &err);
  ASSERT_EQ(status, 0) << err;
  const double without = json::parse(plain)["peak_rss_bytes"].get<double>();
  EXPECT_LT(std::abs(j["peak_rss_bytes"].get<double>() - without), 16.0 * (1 << 20)) << without;

  const std::string bad =
      testing::run_hearth("bench " + model->path() + kQuick + " --probe-every -1 --no-record", &status, &err);
  expect_one_line_error(status, err, "--probe-every must be >= 0");
}

TEST(cli_bench, DefaultDatabaseIsUnderXdgCacheHome) {
  const auto model = testing::make_tiny_model_dir();
  const testing::TempDir tmp;
  std::string out;
  const int status = testing::run_command(
      "XDG_CACHE_HOME=" + tmp.path() + " " + HEARTH_BINARY + " bench " + model->path() + kQuick + " --json >/dev/null",
      &out);
  EXPECT_EQ(status, 0) << out;
  EXPECT_TRUE(fs::exists(tmp.file("hearth/evals.sqlite"))) << out;
}

TEST(cli_bench, CorruptDatabaseIsAOneLineError) {
  const auto model = testing::make_tiny_model_dir();
  const testing::TempDir tmp;
  const std::string db = tmp.file("evals.sqlite");
  {
    std::ofstream out(db, std::ios::binary);
    for (int i = 0; i < 1000; ++i) out << "this is not a database, just text. ";
  }
  int status = 0;
  std::string err;
  testing::run_hearth("bench " + model->path() + kQuick + " --db " + db, &status, &err);
  expect_one_line_error(status, err, db);
  testing::run_hearth("evals --db " + db, &status, &err);
  expect_one_line_error(status, err, "not a database");
}

TEST(cli_bench, BadFlagsAreClearErrors) {
  const auto model = testing::make_tiny_model_dir();
  const std::string m = model->path();
  int status = 0;
  std::string err;
  testing::run_hearth("bench " + m + " --prompt-tokens 0 --no-record", &status, &err);
  expect_one_line_error(status, err, "--prompt-tokens");
  testing::run_hearth("bench " + m + " --reps 0 --no-record", &status, &err);
  expect_one_line_error(status, err, "--reps");
  testing::run_hearth("bench " + m + " --gen-tokens 1 --no-record", &status, &err);
  expect_one_line_error(status, err, "--gen-tokens");
  testing::run_hearth("bench " + m + " --prompt-tokens many --no-record", &status, &err);
  expect_one_line_error(status, err, "--prompt-tokens");
  testing::run_hearth("evals --limit -1", &status, &err);
  expect_one_line_error(status, err, "--limit");
  const std::string help = testing::run_hearth("bench --help", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(help.find("--prompt-tokens"), std::string::npos);
}

}  // namespace
}  // namespace hearth
