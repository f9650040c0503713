// tokenizer_config.json: special tokens (strings or AddedToken objects) and chat templates.
#include <fstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hearth::testing {
namespace {

struct Expected {
  std::string name, bos, eos, template_start;
};

TEST(tokenizer_config, ParsesRealConfigs) {
  const std::vector<Expected> expected = {
      {"qwen3", "", "<|im_end|>", "{%- if tools %}"},
      {"llama3_1", "<|begin_of_text|>", "<|eot_id|>", "{% set loop_messages"},
      {"gemma3", "<bos>", "<end_of_turn>", "{{ bos_token }}"},
      {"deepseek_v3",
       "<\xEF\xBD\x9C"
       "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "<\xEF\xBD\x9C"
       "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
       "{% if not add_generation_prompt"},
  };
  for (const Expected& e : expected) {
    if (!have_tokenizer(e.name)) continue;
    const TokenizerConfig& c = cached_tokenizer(e.name).config();
    EXPECT_EQ(c.bos_token, e.bos) << e.name;
    EXPECT_EQ(c.eos_token, e.eos) << e.name;
    EXPECT_EQ(c.chat_template.rfind(e.template_start, 0), 0u) << e.name << ": " << c.chat_template.substr(0, 60);
  }
  if (have_tokenizer("gemma3")) {
    EXPECT_EQ(cached_tokenizer("gemma3").config().add_bos_token, true);
    EXPECT_EQ(cached_tokenizer("gemma3").config().add_eos_token, false);
  }
  if (have_tokenizer("qwen3")) {
    EXPECT_EQ(cached_tokenizer("qwen3").config().add_bos_token, false);
  }
}

// A minimal tokenizer.json for directory-level tests.
const char* kTinyTokenizer = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(tokenizer_config, NamedTemplatesAndJinjaFile) {
  TempDir dir;
  write(dir.file("tokenizer.json"), kTinyTokenizer);
  write(dir.file("tokenizer_config.json"),
        R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null,
            "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  {
    const Tokenizer tok = Tokenizer::load(dir.path());
    EXPECT_EQ(tok.config().bos_token, "<s>");
    EXPECT_EQ(tok.config().eos_token, "");
    EXPECT_EQ(tok.config().chat_template, "D");
    ASSERT_EQ(tok.config().named_templates.size(), 2u);
    EXPECT_EQ(tok.config().named_templates[1], (std::pair<std::string, std::string>("tool_use", "T")));
    EXPECT_EQ(tok.encode("ab", false), std::vector<int32_t>{2});
  }
  write(dir.file("chat_template.jinja"), "J");
  EXPECT_EQ(Tokenizer::load(dir.path()).config().chat_template, "J");
}

TEST(tokenizer_config, BadConfigNamesTheFile) {
  TempDir dir;
  write(dir.file("tokenizer.json"), kTinyTokenizer);
  write(dir.file("tokenizer_config.json"), R"({"bos_token": 5})");
  try {
    Tokenizer::load(dir.path());
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bos_token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth::testing
