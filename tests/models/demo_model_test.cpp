// The bundled demo model (models/hearth-demo) through the path any Hugging Face checkpoint takes:
// load_model on the bf16 safetensors, the tokenizer's chat template, greedy decoding. Pinned to
// transformers' greedy output in float32 from the same weights (tests/data/demo/reference.json,
// written by scripts/train_demo/train.py), so a regression in the engine, the tokenizer or the
// template shows up as a different token.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model_runs.h"
#include "models/model.h"
#include "runtime/prompt.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

const std::string kModelDir = std::string(HEARTH_SOURCE_DIR) + "/models/hearth-demo";

nlohmann::ordered_json read_reference() {
  std::ifstream in(testing::data_path("demo/reference.json"));
  EXPECT_TRUE(in) << "missing tests/data/demo/reference.json";
  return nlohmann::ordered_json::parse(in);
}

TEST(DemoModel, GreedyChatMatchesTransformers) {
  const nlohmann::ordered_json ref = read_reference();
  ASSERT_FALSE(ref.at("cases").empty());
  const auto model = load_model(kModelDir);
  const Tokenizer tok = Tokenizer::load(kModelDir);
  const PromptRenderer renderer(tok);
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(c.at("messages").dump());
    const nlohmann::ordered_json request = {{"messages", c.at("messages")}, {"add_generation_prompt", true}};
    EXPECT_EQ(renderer.render(request), c.at("prompt_text").get<std::string>());
    const std::vector<int32_t> prompt = renderer.encode_chat(request);
    ASSERT_EQ(prompt, c.at("prompt_ids").get<std::vector<int32_t>>());

    const auto want = c.at("greedy_ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = testing::greedy(*model, prompt, static_cast<int64_t>(want.size()));
    EXPECT_EQ(got, want);
    EXPECT_EQ(tok.decode(got, /*skip_special_tokens=*/true), c.at("greedy_text").get<std::string>());
  }
}

}  // namespace
}  // namespace hearth
