// The text verbs in the exact forms external checks use: tokenize (JSON lines), template
// (one JSON request), generate --prompt (chat template + streaming detokenizer).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string external_tokenizer(const std::string& name) {
  const std::string dir = testing::data_path("external/tokenizers/" + name);
  if (!fs::exists(dir + "/tokenizer.json")) ADD_FAILURE() << dir << " missing: run scripts/fetch_test_data.sh";
  return dir;
}

json load_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(cli_tokenize, EncodesAndDecodesJsonLines) {
  const std::string dir = external_tokenizer("qwen3");
  const json ref = load_json(testing::data_path("tokenizer/reference/qwen3.encodings.json"));
  std::string input, decode_input;
  std::vector<json> want, want_text;
  for (size_t i = 0; i < ref["cases"].size(); i += 7) {
    const json& c = ref["cases"][i];
    input += json{{"text", c["text"]}, {"add_special_tokens", false}}.dump() + "\n";
    want.push_back(c["ids"]);
    decode_input += json{{"ids", c["ids"]}}.dump() + "\n";
    want_text.push_back(c["decoded"]);
  }
  int status = 0;
  std::istringstream lines(testing::run_hearth("tokenize --model " + dir, input, &status));
  ASSERT_EQ(status, 0);
  std::string line;
  for (const json& w : want) {
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_EQ(json::parse(line)["ids"], w);
  }
  std::istringstream texts(testing::run_hearth("tokenize --decode --model " + dir, decode_input, &status));
  ASSERT_EQ(status, 0);
  for (const json& w : want_text) {
    ASSERT_TRUE(std::getline(texts, line));
    EXPECT_EQ(json::parse(line)["text"], w);
  }
  testing::run_hearth("tokenize --model " + dir, "{\"text\": 5}\n", &status);
  EXPECT_EQ(status, 1);
}

TEST(cli_template, RendersLikeTransformers) {
  for (const std::string name : {"qwen3", "llama3_1"}) {
    const std::string dir = external_tokenizer(name);
    const json ref = load_json(testing::data_path("tokenizer/reference/" + name + ".templates.json"));
    // A few renders per tokenizer (each run loads the tokenizer); tests/chat checks them all.
    for (const json& r : ref["renders"]) {
      const std::string case_name = r["name"];
      if (!r.contains("rendered") ||
          (case_name != "tools" && case_name != "multi_turn" && case_name != "thinking_off")) {
        continue;
      }
      json request = {{"messages", r["messages"]}, {"add_generation_prompt", r["add_generation_prompt"]}};
      if (r.contains("tools") && !r["tools"].is_null()) request["tools"] = r["tools"];
      if (r.contains("kwargs")) request.update(r["kwargs"]);
      int status = 0;
      const std::string out = testing::run_hearth("template --model " + dir, request.dump(), &status);
      EXPECT_EQ(status, 0) << name << " " << r["name"];
      EXPECT_EQ(out, r["rendered"].get<std::string>()) << name << " " << r["name"];
    }
  }
}

TEST(cli_generate, PromptGoesThroughChatTemplateAndStreamsText) {
  const auto dir = testing::make_tiny_model_dir();
  const testing::TempDir& model = *dir;
  const Tokenizer tok = Tokenizer::load(model.path());
  int status = 0;
  const std::string out = testing::run_hearth(
      "generate --model " + model.path() + " --prompt 'Hello world' --max-tokens 12 --temp 0 --ignore-eos --json", "",
      &status);
  ASSERT_EQ(status, 0);
  const json j = json::parse(out);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(),
            static_cast<int64_t>(
                tok.encode("<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n", false).size()));
  const auto ids = j["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_EQ(j["text"].get<std::string>(), tok.decode(ids, /*skip_special_tokens=*/true));
  // Without --json the streamed text is printed as it is decoded, then a newline.
  const std::string streamed = testing::run_hearth(
      "generate --model " + model.path() + " --prompt 'Hello world' --max-tokens 12 --temp 0 --ignore-eos", "",
      &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(streamed, j["text"].get<std::string>() + "\n");
  // --raw skips the template: fewer prompt tokens.
  const json raw = json::parse(testing::run_hearth(
      "generate --model " + model.path() + " --prompt 'Hello world' --raw --max-tokens 2 --temp 0 --json", "",
      &status));
  EXPECT_EQ(raw["prompt_tokens"].get<int64_t>(), static_cast<int64_t>(tok.encode("Hello world", true).size()));
  testing::run_hearth("generate --model " + model.path() + " --prompt hi --prompt-tokens 1,2", "", &status);
  EXPECT_EQ(status, 1);
  // An f16 KV cache on this f32 model: it runs; a type we do not have is refused by name.
  const json f16 = json::parse(testing::run_hearth(
      "generate --model " + model.path() + " --prompt 'Hello world' --max-tokens 4 --temp 0 --json --kv-dtype f16", "",
      &status));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(f16["tokens"].size(), 4u);
  std::string err;
  testing::run_hearth("generate --model " + model.path() + " --prompt hi --kv-dtype q8", "", &status, &err);
  EXPECT_EQ(status, 1);
  EXPECT_NE(err.find("--kv-dtype: expected auto, f32, f16 or bf16, got 'q8'"), std::string::npos) << err;
  // --device: the CPU by name; a device this machine lacks, or a name we do not know, is refused.
  const json cpu = json::parse(testing::run_hearth(
      "generate --model " + model.path() + " --prompt 'Hello world' --max-tokens 4 --temp 0 --json --device cpu", "",
      &status));
  EXPECT_EQ(status, 0);
  const auto cpu_ids = cpu["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(cpu_ids, std::vector<int32_t>(ids.begin(), ids.begin() + 4)) << "greedy: a prefix of the 12-token run";
  testing::run_hearth("generate --model " + model.path() + " --prompt hi --device cuda:99", "", &status, &err);
  EXPECT_EQ(status, 1);
  EXPECT_NE(err.find("--device cuda:99: this machine has"), std::string::npos) << err;
  testing::run_hearth("generate --model " + model.path() + " --prompt hi --device gpu", "", &status, &err);
  EXPECT_EQ(status, 1);
  EXPECT_NE(err.find("--device: expected auto, cpu, cuda or cuda:N, got 'gpu'"), std::string::npos) << err;
}

// Sampling and cache flags out of range are one-line errors before anything loads: the model
// path does not exist, so any error but the flag's would name it. (serve used to start with
// --temp nan and fail every request; generate took a negative --top-k or --ctx as "not given".)
// Every verb answers --help with its usage and flags, and exits 0.
TEST(cli_help, EveryVerbHasHelp) {
  for (const std::string verb :
       {"generate", "logits", "tokenize", "template", "serve", "convert", "bench", "evals", "knobs"}) {
    int status = -1;
    const std::string help = testing::run_hearth(verb + " --help", &status);
    EXPECT_EQ(status, 0) << verb;
    EXPECT_EQ(help.rfind("usage: hearth " + verb, 0), 0u) << verb << ": " << help;
    EXPECT_NE(help.find("--help"), std::string::npos) << verb << ": " << help;
  }
  int status = -1;
  const std::string top = testing::run_hearth("--help", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(top.find("write it as GGUF"), std::string::npos) << top;
}

TEST(cli_flags, OutOfRangeValuesAreRefusedBeforeTheModelLoads) {
  const std::string model = testing::data_path("no_such_model");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--temp nan", "--temp must be a finite number >= 0"},
      {"--temp inf", "--temp must be a finite number >= 0"},
      {"--temp -1", "--temp must be a finite number >= 0"},
      {"--top-p 0", "--top-p must be in (0, 1]"},
      {"--top-p nan", "--top-p must be in (0, 1]"},
      {"--top-k -2", "--top-k must be >= 0"},
      {"--ctx -5", "--ctx must be >= 0"},
  };
  for (const char* verb : {"generate", "serve"}) {
    for (const auto& [flag, message] : cases) {
      int status = -1;
      std::string err;
      const std::string extra = std::string(verb) == "generate" ? " --prompt-tokens 1,2" : " --port 0";
      testing::run_hearth(std::string(verb) + " " + model + extra + " " + flag, &status, &err);
      EXPECT_EQ(status, 1) << verb << " " << flag << ": " << err;
      EXPECT_EQ(err, "hearth: error: " + message + "\n") << verb << " " << flag;
    }
  }
  for (const char* model_flag : {"''", "--model ''", "--model="}) {  // an empty model path
    int status = -1;
    std::string err;
    testing::run_hearth(std::string("generate ") + model_flag + " --prompt-tokens 1", &status, &err);
    EXPECT_EQ(status, 1) << model_flag;
    EXPECT_EQ(err, "hearth: error: generate: the model path is empty\n") << model_flag;
  }
}

}  // namespace
}  // namespace hearth
