// Enforces the layer order of docs/architecture.md on every #include in src/:
//   base < core < backends < formats < nn < models < runtime < server < cli
// tokenizer and chat depend only on base; nothing outside src/backends includes a backend.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

namespace {

namespace fs = std::filesystem;

const std::map<std::string, int> kRank = {{"base", 0}, {"core", 1},      {"backends", 2}, {"formats", 3},
                                          {"nn", 4},   {"models", 5},    {"runtime", 6},  {"server", 7},
                                          {"cli", 8},  {"tokenizer", 1}, {"chat", 1}};

// Returns an error text when a file in layer `from` may not include a header of layer `to`.
std::optional<std::string> violation(const std::string& from, const std::string& to) {
  if (from == to || !kRank.count(to)) return std::nullopt;
  if (!kRank.count(from)) return "unknown layer '" + from + "'";
  if (to == "backends") return "only src/backends may include backend headers";
  if ((from == "tokenizer" || from == "chat") && to != "base") return from + " may include only base";
  if ((to == "tokenizer" || to == "chat") && kRank.at(from) < kRank.at("runtime")) {
    return to + " may be included only from runtime, server or cli";
  }
  if (kRank.at(to) > kRank.at(from)) return from + " is below " + to + " and may not include it";
  if (kRank.at(to) == kRank.at(from)) return from + " and " + to + " are peers and may not include each other";
  return std::nullopt;
}

TEST(Layering, RulesCatchViolations) {
  EXPECT_FALSE(violation("nn", "formats"));
  EXPECT_FALSE(violation("cli", "runtime"));
  EXPECT_FALSE(violation("tokenizer", "base"));
  EXPECT_TRUE(violation("core", "nn"));
  EXPECT_TRUE(violation("models", "backends"));
  EXPECT_TRUE(violation("tokenizer", "core"));
  EXPECT_TRUE(violation("nn", "tokenizer"));
  EXPECT_FALSE(violation("cli", "server"));
  EXPECT_TRUE(violation("server", "cli"));
}

TEST(Layering, IncludesFollowLayerOrder) {
  const fs::path src = fs::path(HEARTH_SOURCE_DIR) / "src";
  const std::regex include_re(R"re(^\s*#\s*include\s*"([a-z_]+)/)re");
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
    ++files;
    const std::string from = fs::relative(entry.path(), src).begin()->string();
    std::ifstream in(entry.path());
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      if (auto why = violation(from, m[1].str())) {
        ADD_FAILURE() << fs::relative(entry.path(), src).string() << ":" << line_no << ": " << line << "\n  " << *why;
      }
    }
  }
  EXPECT_GT(files, 20);
}

}  // namespace
