// Tokenizer throughput: encodes ~1 MB of English text (the repo's docs, README and the GPL-3
// text, repeated) with a real tokenizer and prints MB/s and tokens/s.
// Usage: tokenizer_bench [TOKENIZER_DIR] [REPO_ROOT]   (run from the repo root by default)
#include <cstdio>
#include <filesystem>
#include <string>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

static std::string corpus(const fs::path& root, size_t target_bytes) {
  std::string seed;
  std::vector<fs::path> files = {root / "README.md", "/usr/share/common-licenses/GPL-3"};
  if (fs::is_directory(root / "docs")) {
    for (const auto& e : fs::directory_iterator(root / "docs")) {
      if (e.path().extension() == ".md") files.push_back(e.path());
    }
  }
  for (const fs::path& f : files) {
    if (fs::exists(f)) seed += hearth::read_text_file(f.string()) + "\n";
  }
  if (seed.empty()) throw hearth::InputError("no text found under " + root.string());
  std::string text;
  while (text.size() < target_bytes) text += seed;
  return text;
}

int main(int argc, char** argv) {
  try {
    const std::string dir = argc > 1 ? argv[1] : "tests/data/external/tokenizers/qwen3";
    const fs::path root = argc > 2 ? argv[2] : ".";
    hearth::Timer load_timer;
    const hearth::Tokenizer tok = hearth::Tokenizer::load(dir);
    const double load_s = load_timer.seconds();
    const std::string text = corpus(root, 1 << 20);
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("tokenizer %s (loaded in %.2f s), text %.2f MB\n", dir.c_str(), load_s, mb);
    // The first pass fills the word cache; the second shows the steady state.
    for (const char* pass : {"cold", "warm"}) {
      hearth::Timer t;
      const std::vector<int32_t> ids = tok.encode(text, false);
      const double s = t.seconds();
      std::printf("encode %-4s: %.3f s, %.1f MB/s, %.0f tokens/s (%zu tokens)\n", pass, s, mb / s,
                  static_cast<double>(ids.size()) / s, ids.size());
      if (pass[0] == 'w') {
        hearth::Timer d;
        const std::string back = tok.decode(ids);
        const double ds = d.seconds();
        std::printf("decode     : %.3f s, %.0f tokens/s, round trip %s\n", ds, static_cast<double>(ids.size()) / ds,
                    back == text ? "exact" : "DIFFERS");
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: error: %s\n", e.what());
    return 1;
  }
}
