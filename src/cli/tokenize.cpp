// hearth tokenize: JSON lines in, JSON lines out.
//   encode: {"text": "...", "add_special_tokens": false} -> {"ids": [...]}
//   --decode: {"ids": [...], "skip_special_tokens": false} -> {"text": "..."}
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "runtime/model_tokenizer.h"
#include "runtime/prompt.h"

namespace hearth::cli {
namespace {

// The boolean `key` of `in`, `fallback` when absent.
bool flag_field(const nlohmann::ordered_json& in, const char* key, bool fallback) {
  const auto at = in.find(key);
  if (at == in.end()) return fallback;
  if (!at->is_boolean()) throw InputError(std::string("\"") + key + "\" must be true or false");
  return at->get<bool>();
}

nlohmann::ordered_json handle_line(const Tokenizer& tok, const std::string& line, bool decode) {
  const nlohmann::ordered_json in = parse_request_json(line, "the line");
  if (!in.is_object()) throw InputError("not a JSON object");
  if (decode) {
    if (!in.contains("ids") || !in["ids"].is_array()) throw InputError("expected \"ids\": [...]");
    std::vector<int32_t> ids;
    for (const auto& v : in["ids"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size()) {
        throw InputError("\"ids\" holds " + v.dump() + ", not a token id of this tokenizer");
      }
      ids.push_back(v.get<int32_t>());
    }
    return {{"text", tok.decode(ids, flag_field(in, "skip_special_tokens", false))}};
  }
  if (!in.contains("text") || !in["text"].is_string()) throw InputError("expected \"text\": \"...\"");
  return {{"ids", tok.encode(in["text"].get<std::string>(), flag_field(in, "add_special_tokens", true))}};
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args) {
  std::string model;
  bool decode = false;
  Flags f("tokenize", "[MODEL] [--decode]",
          "Reads JSON lines on stdin and writes one JSON line per input:\n"
          "  {\"text\": \"...\", \"add_special_tokens\": false}  ->  {\"ids\": [...]}\n"
          "  with --decode: {\"ids\": [...], \"skip_special_tokens\": false}  ->  {\"text\": \"...\"}\n"
          "add_special_tokens defaults to true, as in Hugging Face tokenizers.");
  f.model_dir("Directory with tokenizer.json (and tokenizer_config.json), or a GGUF file.", &model);
  f.add("decode", "Decode ids to text instead of encoding.", &decode);
  if (!f.parse(args)) return 0;
  const Tokenizer tok = load_tokenizer(model);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      std::printf(
          "%s\n",
          handle_line(tok, line, decode).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } catch (const InputError& e) {
      throw InputError("stdin line " + std::to_string(line_no) + ": " + e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hearth::cli
