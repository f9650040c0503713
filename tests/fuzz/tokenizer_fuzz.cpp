// libFuzzer target: tokenizer.json loading, then encode/decode on whatever loaded. Malformed
// input must end as an InputError with a one-line message; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "fuzz_checks.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const hearth::Tokenizer tok = hearth::Tokenizer::from_json(text, "fuzz");
    for (const char* s : {"", "Hello world", " <|im_start|>user\n\t12345 ", "日本語 😀 café", "\xff\xfe"}) {
      try {
        const std::vector<int32_t> ids = tok.encode(s, true);
        (void)tok.decode(ids, false);
      } catch (const hearth::InputError& e) {
        hearth::fuzz::check_one_line(e);
      }
    }
    std::vector<int32_t> all;
    for (int32_t id = 0; id < tok.vocab_size() && id < 512; ++id) all.push_back(id);
    hearth::StreamingDecoder stream(tok);
    for (int32_t id : all) (void)stream.push(id);
    (void)stream.flush();
    (void)tok.decode(all, true);
  } catch (const hearth::InputError& e) {
    hearth::fuzz::check_one_line(e);
  }
  return 0;
}
