// Every case of tests/data/tokenizer/corpus.json must encode and decode exactly as HF
// tokenizers 0.23.2 did (tests/data/tokenizer/reference/<name>.encodings.json).
#include "tokenizer_test_util.h"

namespace hearth::testing {
namespace {

class tokenizer_parity : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_parity, MatchesHfReference) {
  const std::string name = GetParam();
  if (!have_tokenizer(name)) return;
  const Tokenizer& tok = cached_tokenizer(name);
  const std::vector<ReferenceCase> cases = reference_cases(name);
  ASSERT_GT(cases.size(), 100u);
  int failed = 0;
  for (const ReferenceCase& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, false);
    const std::vector<int32_t> ids_special = tok.encode(c.text, true);
    const std::string decoded = tok.decode(c.ids, false);
    const std::string decoded_special = tok.decode(c.ids_special, false);
    const std::string decoded_skip = tok.decode(c.ids_special, true);
    const bool ok = ids == c.ids && ids_special == c.ids_special && decoded == c.decoded &&
                    decoded_special == c.decoded_special && decoded_skip == c.decoded_skip;
    if (ok) continue;
    ++failed;
    ADD_FAILURE() << name << " text " << show(c.text) << "\n  ids         got [" << join_ids(ids) << "]\n"
                  << "              want [" << join_ids(c.ids) << "]\n  ids_special got [" << join_ids(ids_special)
                  << "]\n              want [" << join_ids(c.ids_special) << "]\n  decoded got " << show(decoded)
                  << " want " << show(c.decoded) << "\n  decoded_special got " << show(decoded_special) << " want "
                  << show(c.decoded_special) << "\n  decoded_skip got " << show(decoded_skip) << " want "
                  << show(c.decoded_skip);
  }
  std::printf("[ tokenizer ] %s: %zu/%zu cases match\n", name.c_str(), cases.size() - failed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(All, tokenizer_parity, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& info) { return info.param; });

class tokenizer_api : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_api, VocabLookupsAgree) {
  const std::string name = GetParam();
  if (!have_tokenizer(name)) return;
  const Tokenizer& tok = cached_tokenizer(name);
  EXPECT_GT(tok.vocab_size(), 30000);
  for (int32_t id : {0, 1, 100, 1000, static_cast<int32_t>(tok.vocab_size() - 1)}) {
    const std::string s = tok.id_to_token(id);
    if (s.empty()) continue;
    EXPECT_EQ(tok.token_to_id(s), id) << name << " id " << id;
  }
  EXPECT_EQ(tok.id_to_token(-1), "");
  EXPECT_EQ(tok.id_to_token(static_cast<int32_t>(tok.vocab_size())), "");
  EXPECT_FALSE(tok.token_to_id("no such token \x01\x02"));
  // Unknown ids are skipped by decode, as in HF.
  const int32_t bad[] = {-5, static_cast<int32_t>(tok.vocab_size()) + 7};
  EXPECT_EQ(tok.decode(bad), "");
  EXPECT_THROW(tok.encode("bad \xff utf8", false), InputError);
}

TEST_P(tokenizer_api, EosIsSpecial) {
  const std::string name = GetParam();
  if (!have_tokenizer(name)) return;
  const Tokenizer& tok = cached_tokenizer(name);
  const std::string eos = tok.config().eos_token;
  ASSERT_FALSE(eos.empty()) << name;
  const auto id = tok.token_to_id(eos);
  ASSERT_TRUE(id) << name << " eos " << eos;
  EXPECT_TRUE(tok.is_special(*id));
  EXPECT_EQ(tok.encode(eos, false), std::vector<int32_t>{*id});
}

INSTANTIATE_TEST_SUITE_P(All, tokenizer_api, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth::testing
