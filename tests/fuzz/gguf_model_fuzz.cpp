// libFuzzer target: what a GGUF file's metadata becomes besides its tensors, as a GGUF model
// loads: the tokenizer (tokenizer.ggml.* -> tokenizer.json -> Tokenizer, then encode and decode),
// the Hugging Face config and the generation config. Malformed metadata must end as an
// InputError with a one-line message; a crash, a sanitizer report or any other exception is a
// bug. The input goes to a memfd, so that GgufFile opens it by path as the loaders do.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/gguf_tokenizer.h"
#include "fuzz_checks.h"
#include "tokenizer/tokenizer.h"

namespace {

using hearth::fuzz::check_one_line;
using hearth::fuzz::expect_clean;

void use_tokenizer(const hearth::GgufTokenizer& g) {
  hearth::TokenizerConfig config;
  config.bos_token = g.bos_token;
  config.eos_token = g.eos_token;
  config.chat_template = g.chat_template;
  const hearth::Tokenizer tok = hearth::Tokenizer::from_json(g.tokenizer_json, "fuzz.gguf", config);
  for (const char* s : {"", "Hello world", " <|im_start|>user\n\t12345 ", "日本語 😀 café", "\xff\xfe"}) {
    expect_clean([&] { (void)tok.decode(tok.encode(s, true), false); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("gguf_model_fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const std::shared_ptr<hearth::GgufFile> file = hearth::GgufFile::open(path);
    expect_clean([&] { use_tokenizer(hearth::gguf_tokenizer(*file)); });
    expect_clean([&] { (void)hearth::gguf_hf_config(*file); });
    expect_clean([&] { (void)hearth::gguf_generation_config(file->metadata()); });
  } catch (const hearth::InputError& e) {
    check_one_line(e);
  }
  return 0;
}
