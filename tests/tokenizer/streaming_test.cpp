// StreamingDecoder: every push is valid UTF-8 and the pieces add up to decode(all ids).
#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hearth::testing {
namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

class tokenizer_streaming : public ::testing::TestWithParam<std::string> {};

TEST_P(tokenizer_streaming, ConcatenationEqualsDecode) {
  const std::string name = GetParam();
  if (!have_tokenizer(name)) return;
  const Tokenizer& tok = cached_tokenizer(name);
  int failed = 0;
  for (const ReferenceCase& c : reference_cases(name)) {
    for (bool skip : {false, true}) {
      StreamingDecoder stream(tok, skip);
      std::string all;
      bool pieces_valid = true;
      for (int32_t id : c.ids_special) {
        const std::string piece = stream.push(id);
        pieces_valid = pieces_valid && valid_utf8(piece);
        all += piece;
      }
      all += stream.flush();
      const std::string want = tok.decode(c.ids_special, skip);
      if (all == want && pieces_valid) continue;
      ++failed;
      ADD_FAILURE() << name << " skip=" << skip << " text " << show(c.text) << "\n  streamed " << show(all)
                    << "\n  decoded  " << show(want) << (pieces_valid ? "" : "\n  (a push returned invalid UTF-8)");
    }
  }
  EXPECT_EQ(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(All, tokenizer_streaming, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& info) { return info.param; });

// Arbitrary id sequences (byte tokens, invalid runs, unknown ids, specials) too, not just the
// ones an encoder produces.
TEST_P(tokenizer_streaming, RandomIdsConcatenationEqualsDecode) {
  const std::string name = GetParam();
  if (!have_tokenizer(name)) return;
  const Tokenizer& tok = cached_tokenizer(name);
  std::mt19937 rng(7);
  const auto n_vocab = static_cast<uint32_t>(tok.vocab_size());
  int failed = 0;
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<int32_t> ids(rng() % 12);
    // Low ids are where the specials and (for SentencePiece vocabularies) the byte tokens live.
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 4 == 0 ? rng() % 300 : rng() % (n_vocab + 8)) - 4;
    for (bool skip : {false, true}) {
      StreamingDecoder stream(tok, skip);
      std::string all;
      for (int32_t id : ids) all += stream.push(id);
      all += stream.flush();
      if (all != tok.decode(ids, skip) && failed++ < 5) {
        ADD_FAILURE() << name << " ids [" << join_ids(ids) << "] skip=" << skip << "\n  streamed " << show(all)
                      << "\n  decoded  " << show(tok.decode(ids, skip));
      }
    }
  }
  EXPECT_EQ(failed, 0);
}

TEST(tokenizer_streaming_bytes, HoldsBackSplitCharacters) {
  if (!have_tokenizer("llama2")) return;
  const Tokenizer& tok = cached_tokenizer("llama2");
  // "€" as three byte-fallback tokens: nothing comes out while the byte run may continue (a
  // later invalid byte would turn the whole run into U+FFFDs), then it comes out whole.
  const auto e2 = tok.token_to_id("<0xE2>"), x82 = tok.token_to_id("<0x82>"), xac = tok.token_to_id("<0xAC>");
  const auto word = tok.token_to_id("\xE2\x96\x81the");
  ASSERT_TRUE(e2 && x82 && xac && word);
  StreamingDecoder stream(tok);
  EXPECT_EQ(stream.push(*e2), "");
  EXPECT_EQ(stream.push(*x82), "");
  EXPECT_EQ(stream.push(*xac), "");
  EXPECT_EQ(stream.push(*word), "\xE2\x82\xAC the");
  EXPECT_EQ(stream.flush(), "");
  StreamingDecoder at_end(tok);
  for (int32_t id : {*e2, *x82, *xac}) EXPECT_EQ(at_end.push(id), "");
  EXPECT_EQ(at_end.flush(), "\xE2\x82\xAC");
  // An invalid byte after the run replaces every byte of it, as decode() does.
  StreamingDecoder invalid(tok);
  std::string all;
  for (int32_t id : {*e2, *x82, *xac, *xac, *word}) all += invalid.push(id);
  all += invalid.flush();
  const int32_t ids[] = {*e2, *x82, *xac, *xac, *word};
  EXPECT_EQ(all, tok.decode(ids));
}

}  // namespace
}  // namespace hearth::testing
