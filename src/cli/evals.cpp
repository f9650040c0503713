// hearth evals: the runs `hearth bench` recorded, newest first, as an aligned table or JSON.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/evals_db.h"
#include "cli/flags.h"
#include "cli/verbs.h"

namespace hearth::cli {
namespace {

using json = nlohmann::ordered_json;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

std::string params_text(int64_t n) {
  return n >= 1000000000 ? fixed(static_cast<double>(n) / 1e9, 2) + "B" : fixed(static_cast<double>(n) / 1e6, 1) + "M";
}

void print_table(const std::vector<BenchRecord>& runs) {
  struct Column {
    const char* title;
    bool numeric;
  };
  const std::vector<Column> columns = {
      {"id", true},     {"time (UTC)", false}, {"commit", false},  {"model", false}, {"arch", false},
      {"dtype", false}, {"params", true},      {"threads", true},  {"pp", true},     {"pp tok/s", true},
      {"ttft s", true}, {"tg", true},          {"tg tok/s", true}, {"GB/s", true},   {"roofline", true},
  };
  std::vector<std::vector<std::string>> rows;
  for (const BenchRecord& r : runs) {
    rows.push_back({std::to_string(r.id), r.timestamp, r.commit, model_name(r.model_path), r.model_arch, r.model_dtype,
                    params_text(r.model_params), std::to_string(r.threads), std::to_string(r.prompt_tokens),
                    fixed(r.prefill_tokens_per_second, 1), fixed(r.ttft_seconds, 3), std::to_string(r.gen_tokens),
                    fixed(r.decode_tokens_per_second, 2), fixed(r.bandwidth_bytes_per_second / 1e9, 1),
                    fixed(100 * r.roofline_fraction, 0) + "%"});
  }
  std::vector<size_t> width;
  for (const Column& c : columns) width.push_back(std::string(c.title).size());
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(width[i] - cells[i].size(), ' ');
      if (i > 0) line += "  ";
      line += columns[i].numeric ? pad + cells[i] : cells[i] + (i + 1 < cells.size() ? pad : "");
    }
    std::printf("%s\n", line.c_str());
  };
  std::vector<std::string> header;
  for (const Column& c : columns) header.push_back(c.title);
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

}  // namespace

int run_evals(const std::vector<std::string>& args) {
  std::string db_path;
  bool json_out = false;
  int64_t limit = 20;
  Flags f("evals", "[--db PATH] [--json] [--limit N]",
          "Lists the runs `hearth bench` recorded in the evals database, newest first: pp = prompt\n"
          "tokens (prefill), tg = generated tokens (decode), GB/s = memory read bandwidth measured in\n"
          "the same run, roofline = decode speed as a fraction of bandwidth / bytes read per token.");
  f.add("db", "Evals database (default $XDG_CACHE_HOME/hearth/evals.sqlite, else ~/.cache/hearth/...).", &db_path);
  f.add("json", "Print a JSON array of the recorded runs (each as `hearth bench --json` printed it, plus id).",
        &json_out);
  f.add("limit", "Most runs to list; 0 = all (default 20).", &limit);
  if (!f.parse(args)) return 0;
  if (limit < 0) throw InputError("evals: --limit must be >= 0");
  if (db_path.empty()) db_path = default_evals_db_path();
  const std::vector<BenchRecord> runs = list_bench_runs(db_path, limit);

  if (json_out) {
    json out = json::array();
    for (const BenchRecord& r : runs) {
      json run = json::parse(r.json, nullptr, /*allow_exceptions=*/false);
      if (!run.is_object()) throw FileError(db_path, "run " + std::to_string(r.id) + " holds malformed JSON");
      json entry = {{"id", r.id}};
      entry.update(run);
      out.push_back(std::move(entry));
    }
    std::printf("%s\n", out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  if (runs.empty()) {
    std::printf("no runs recorded in %s (record one with hearth bench MODEL)\n", db_path.c_str());
    return 0;
  }
  print_table(runs);
  return 0;
}

}  // namespace hearth::cli
