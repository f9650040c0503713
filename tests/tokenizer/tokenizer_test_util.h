// Shared by the tokenizer tests: the real tokenizer files and HF's reference outputs.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/strings.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth::testing {

inline std::vector<std::string> tokenizer_names() {
  return {"qwen3", "llama3_1", "gemma3", "gptoss", "deepseek_v3", "llama2"};
}

inline std::string tokenizer_dir(const std::string& name) { return data_path("external/tokenizers/" + name); }

// The external files are fetched, not committed: a missing one is a setup error to fix, so
// the test fails (it does not skip) and says how to fix it.
inline bool have_tokenizer(const std::string& name) {
  const std::string path = tokenizer_dir(name) + "/tokenizer.json";
  if (std::filesystem::exists(path)) return true;
  ADD_FAILURE() << "missing " << path << ": run scripts/fetch_test_data.sh";
  return false;
}

// Loading the large vocabularies takes a moment; each is loaded once per test binary.
inline const Tokenizer& cached_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer_dir(name)));
  return *slot;
}

struct ReferenceCase {
  std::string text;
  std::vector<int32_t> ids, ids_special;
  std::string decoded, decoded_special, decoded_skip;
};

inline std::vector<ReferenceCase> reference_cases(const std::string& name) {
  const auto doc = nlohmann::json::parse(read_text_file(data_path("tokenizer/reference/" + name + ".encodings.json")));
  std::vector<ReferenceCase> cases;
  for (const auto& c : doc.at("cases")) {
    cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                     c.at("ids_special").get<std::vector<int32_t>>(), c.at("decoded").get<std::string>(),
                     c.at("decoded_special").get<std::string>(), c.at("decoded_skip").get<std::string>()});
  }
  return cases;
}

// Quoted and escaped for a failure message (built piecewise: GCC 12 -Wrestrict misfires on
// "literal" + std::string).
inline std::string show(const std::string& s) {
  std::string out(1, '"');
  out += printable(s, 300);
  out += '"';
  return out;
}

}  // namespace hearth::testing
