// The tokenizer synthesized from a GGUF file's metadata is the Hugging Face one: the real Llama
// 3.1 and Qwen3 tokenizer.json files are written as llama.cpp's converter writes their
// vocabularies (formats/gguf_export.h), and the GGUF tokenizer encodes and decodes the
// tokenizer corpus exactly as the tokenizer.json does (and as HF's reference outputs say).
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "models/gguf_fixture.h"
#include "runtime/model_tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace hearth {
namespace {

std::string write_vocab(const std::string& path, const testing::GgufKv& kv) {
  GgufWriter w(path, {.overwrite = true});
  for (const auto& [k, v] : kv) w.set_metadata(k, v);
  w.finish();
  return path;
}

struct Vocab {
  std::string name, pre;
  int64_t vocab_size;  // the model's, which the converter pads the token list to
};

class GgufTokenizer : public ::testing::TestWithParam<Vocab> {};

TEST_P(GgufTokenizer, MatchesTheHuggingFaceTokenizer) {
  const Vocab& v = GetParam();
  if (!testing::have_tokenizer(v.name)) return;
  testing::TempDir tmp;
  const GgufKeyValues kv = gguf_tokenizer_metadata(testing::tokenizer_dir(v.name), v.vocab_size);
  for (const auto& [key, value] : kv) {  // the pre-tokenizer named from tokenizer.json's regex
    if (key == "tokenizer.ggml.pre") {
      EXPECT_EQ(value, GgufValue(v.pre));
    }
  }
  const std::string path = write_vocab(tmp.file("vocab.gguf"), kv);
  const Tokenizer gguf = load_tokenizer(path);
  const Tokenizer& hf = testing::cached_tokenizer(v.name);
  EXPECT_EQ(gguf.vocab_size(), hf.vocab_size());
  EXPECT_EQ(gguf.config().chat_template, hf.config().chat_template);
  EXPECT_EQ(gguf.config().eos_token, hf.config().eos_token);
  EXPECT_EQ(gguf.config().bos_token, hf.config().bos_token);
  size_t checked = 0;
  for (const testing::ReferenceCase& c : testing::reference_cases(v.name)) {
    const std::vector<int32_t> ids = gguf.encode(c.text, false), ids_special = gguf.encode(c.text, true);
    ASSERT_EQ(ids, c.ids) << testing::show(c.text);
    ASSERT_EQ(ids_special, c.ids_special) << testing::show(c.text);
    ASSERT_EQ(ids, hf.encode(c.text, false));
    ASSERT_EQ(gguf.decode(c.ids), c.decoded) << testing::show(c.text);
    ASSERT_EQ(gguf.decode(c.ids_special), c.decoded_special) << testing::show(c.text);
    ++checked;
  }
  EXPECT_GT(checked, 100u);
  // Every added token is one token, and special exactly when llama.cpp's CONTROL type says so.
  for (int32_t id = 0; id < hf.vocab_size(); ++id) {
    const std::string t = hf.id_to_token(id);
    if (t.empty() || !hf.is_special(id)) continue;
    ASSERT_EQ(gguf.token_to_id(t), id) << t;
    ASSERT_TRUE(gguf.is_special(id)) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Real, GgufTokenizer,
                         ::testing::Values(Vocab{"llama3_1", "llama-bpe", 128256}, Vocab{"qwen3", "qwen2", 151936},
                                           Vocab{"llama2", "", 32000}),
                         [](const auto& info) { return info.param.name; });

// The tiny byte-level tokenizer of the CLI fixtures, as a GPT-2 style vocabulary.
TEST(GgufTokenizerTiny, MatchesTheHuggingFaceTokenizer) {
  testing::TempDir tmp;
  const std::string dir = testing::data_path("tiny_tokenizer");
  const std::string path = write_vocab(tmp.file("tiny.gguf"), gguf_tokenizer_metadata(dir, 1000));
  const Tokenizer gguf = load_tokenizer(path);
  const Tokenizer hf = Tokenizer::load(dir);
  const auto corpus = nlohmann::json::parse(read_text_file(testing::data_path("tokenizer/corpus.json")));
  for (const auto& text : corpus) {
    const std::string s = text.get<std::string>();
    const std::vector<int32_t> ids = hf.encode(s, true);
    ASSERT_EQ(gguf.encode(s, true), ids) << testing::show(s);
    ASSERT_EQ(gguf.decode(ids), hf.decode(ids));
    ASSERT_EQ(gguf.decode(ids, true), hf.decode(ids, true));
  }
  EXPECT_EQ(gguf.config().chat_template, hf.config().chat_template);
  EXPECT_EQ(gguf.config().eos_token, "<|im_end|>");
  EXPECT_EQ(gguf.config().pad_token, "<|endoftext|>");
}

TEST(GgufTokenizerErrors, UnsupportedAndMalformedVocabularies) {
  testing::TempDir tmp;
  const testing::GgufKv base = gguf_tokenizer_metadata(testing::data_path("tiny_tokenizer"), 1000);
  auto expect_error = [&](const std::function<void(testing::GgufKv&)>& edit, const std::string& needle) {
    testing::GgufKv kv = base;
    edit(kv);
    try {
      load_tokenizer(write_vocab(tmp.file("bad.gguf"), kv));
      ADD_FAILURE() << "loaded; expected an error containing '" << needle << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(
      [](auto& kv) { testing::set_kv(kv, "tokenizer.ggml.model", "bert"); },
      "tokenizer.ggml.model 'bert' is not supported (byte-level BPE 'gpt2' and SentencePiece BPE 'llama' are)");
  // A SentencePiece vocabulary without merges needs a finite score per token to derive them.
  auto sentencepiece = [](testing::GgufKv& kv) {
    testing::set_kv(kv, "tokenizer.ggml.model", "llama");
    testing::erase_kv(kv, "tokenizer.ggml.merges");
  };
  expect_error(sentencepiece, "missing metadata key 'tokenizer.ggml.scores'");
  expect_error(
      [&](auto& kv) {
        sentencepiece(kv);
        testing::set_kv(kv, "tokenizer.ggml.scores", std::vector<float>{0.0f, -1.0f});
      },
      "tokenizer.ggml.scores has 2 entries for 1000 tokens");
  expect_error(
      [&](auto& kv) {
        sentencepiece(kv);
        std::vector<float> scores(1000, -1.0f);
        scores[7] = std::numeric_limits<float>::quiet_NaN();
        testing::set_kv(kv, "tokenizer.ggml.scores", scores);
      },
      "tokenizer.ggml.scores[7] is not a finite number");
  expect_error([](auto& kv) { testing::set_kv(kv, "tokenizer.ggml.pre", "deepseek-llm"); },
               "tokenizer.ggml.pre 'deepseek-llm' is not supported");
  expect_error([](auto& kv) { testing::erase_kv(kv, "tokenizer.ggml.model"); },
               "missing metadata key 'tokenizer.ggml.model'");
  expect_error(
      [](auto& kv) {
        testing::set_kv(kv, "tokenizer.ggml.token_type", std::vector<int32_t>{1, 1});
      },
      "tokenizer.ggml.token_type has 2 entries for 1000 tokens");
  expect_error([](auto& kv) { testing::set_kv(kv, "tokenizer.ggml.eos_token_id", uint32_t{5000}); },
               "'tokenizer.ggml.eos_token_id': token id 5000 outside the vocabulary of 1000");
  expect_error([](auto& kv) { testing::set_kv(kv, "tokenizer.ggml.add_bos_token", true); },
               "asks to add a token but has no 'tokenizer.ggml.bos_token_id'");
}

}  // namespace
}  // namespace hearth
