// Malformed tokenizer.json: a one-line InputError naming the origin, never a crash.
#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hearth::testing {
namespace {

struct BadCase {
  const char* text;
  const char* message_part;
};

TEST(tokenizer_bad_input, MalformedJsonIsAOneLineError) {
  const std::vector<BadCase> cases = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected an object"},
      {"{}", "'model' is missing"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}})", "WordPiece"},
      {R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "unknown token 'b'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "merge result 'ab'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})", "model.merges[0]"},
      {R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})", "expected an integer"},
      {R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", "model.vocab"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000}, "merges": []}})", "ids up to 2000000000"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": 7}})", "model.merges"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer":
          {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})",
       "bad regex"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer":
          {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"}})",
       "Sideways"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": "BertNormalizer"}})",
       "BertNormalizer"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "Strip", "content": "ab",
          "start": 1, "stop": 0}})",
       "single character"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": [{"id": -3, "content": "x"}]})",
       "added_tokens[0].id"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "post_processor": {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {}}})",
       "<s>"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})", "unk_token"},
  };
  for (const BadCase& c : cases) {
    try {
      Tokenizer::from_json(c.text, "bad/tokenizer.json");
      ADD_FAILURE() << "no error for " << c.text;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("bad/tokenizer.json", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.message_part), std::string::npos) << "want '" << c.message_part << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(tokenizer_bad_input, DeepSequencesAreRejected) {
  std::string nested = R"({"type": "NFC"})";
  for (int i = 0; i < 100; ++i) nested = R"({"type": "Sequence", "normalizers": [)" + nested + "]}";
  const std::string text = R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": )" + nested + "}";
  EXPECT_THROW(Tokenizer::from_json(text, "deep.json"), FileError);
}

TEST(tokenizer_bad_input, MissingDirectoryNamesTheFile) {
  try {
    Tokenizer::load("/nonexistent/model");
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model/tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth::testing
