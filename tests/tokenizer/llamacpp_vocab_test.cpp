// GGUF files from the wild: llama.cpp's own vocabulary-only files (models/ggml-vocab-*.gguf,
// written by its converter from the real HF tokenizers) and, beside each, the ids HF's tokenizer
// gives for llama.cpp's tokenizer test texts (`.inp` texts separated by __ggml_vocab_test__
// lines, `.out` one line of ids per text; encode without special tokens). A vocabulary whose
// tokenizer model and pre-tokenizer Hearth implements must give those ids exactly, and decode
// them back to the text; every other one must be refused with an error that names what is not
// supported.
// The files are fetched by scripts/fetch_llamacpp_data.sh (tests/data/external/llamacpp_vocab).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "base/error.h"
#include "base/mapped_file.h"
#include "runtime/model_tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace hearth {
namespace {

std::string vocab_path(const std::string& name) {
  return testing::data_path("external/llamacpp_vocab/ggml-vocab-" + name + ".gguf");
}

bool have_vocab(const std::string& name) {
  if (std::filesystem::exists(vocab_path(name))) return true;
  ADD_FAILURE() << "missing " << vocab_path(name) << ": run scripts/fetch_llamacpp_data.sh";
  return false;
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// As llama.cpp's tests/test-tokenizer-0 reads the pair of files.
std::vector<Case> read_cases(const std::string& name) {
  const std::string inp = read_text_file(vocab_path(name) + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::istringstream out(read_text_file(vocab_path(name) + ".out"));
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    EXPECT_LT(i, texts.size()) << name << ": more lines of ids than texts";
    if (i >= texts.size()) break;
    Case c{texts[i], {}};
    std::istringstream ids(line);
    for (int32_t id = 0; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << name;
  return cases;
}

class LlamaCppVocab : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVocab, EncodesAsHuggingFaceAndDecodesBack) {
  const std::string& name = GetParam();
  if (!have_vocab(name)) return;
  const Tokenizer tok = load_tokenizer(vocab_path(name));
  const std::vector<Case> cases = read_cases(name);
  EXPECT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, false);
    EXPECT_EQ(ids, c.ids) << name << ": " << testing::show(c.text);
    EXPECT_EQ(tok.decode(c.ids), c.text) << name << " decode: " << testing::show(c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Real, LlamaCppVocab, ::testing::Values("llama-bpe", "qwen2", "gpt-2", "llama-spm", "phi-3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = ch == '-' ? '_' : ch;
                           return s;
                         });

// The others: tokenizer models or pre-tokenizers Hearth does not implement, refused by name.
struct Refused {
  std::string name, names;  // the file, and what the error must quote
};

class LlamaCppVocabRefused : public ::testing::TestWithParam<Refused> {};

TEST_P(LlamaCppVocabRefused, IsRefusedByName) {
  const Refused& r = GetParam();
  if (!have_vocab(r.name)) return;
  try {
    load_tokenizer(vocab_path(r.name));
    ADD_FAILURE() << r.name << " loaded";
  } catch (const Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + r.names + "'"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Real, LlamaCppVocabRefused,
                         ::testing::Values(Refused{"bert-bge", "bert"}, Refused{"deepseek-llm", "deepseek-llm"},
                                           Refused{"deepseek-coder", "deepseek-coder"},
                                           Refused{"command-r", "command-r"}, Refused{"falcon", "falcon"},
                                           Refused{"gemma-4", "gemma4"}, Refused{"mpt", "mpt"},
                                           Refused{"nomic-bert-moe", "t5"}, Refused{"qwen35", "qwen35"},
                                           Refused{"refact", "refact"}, Refused{"starcoder", "starcoder"}),
                         [](const auto& info) {
                           std::string s = info.param.name;
                           for (char& ch : s) ch = ch == '-' ? '_' : ch;
                           return s;
                         });

}  // namespace
}  // namespace hearth
