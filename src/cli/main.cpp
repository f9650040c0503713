// hearth: one binary, one verb per file. Errors from bad input end as one line and exit 1.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/verbs.h"

namespace {

struct Verb {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
};

constexpr Verb kVerbs[] = {
    {"generate", "Generate text from a prompt (chat template applied) or from token ids.", hearth::cli::run_generate},
    {"logits", "Write the logits of every prompt position to a safetensors file.", hearth::cli::run_logits},
    {"tokenize", "Encode text to token ids or decode ids to text (JSON lines).", hearth::cli::run_tokenize},
    {"template", "Render the model's chat template for a JSON request.", hearth::cli::run_template},
    {"serve", "Serve the model over OpenAI- and Anthropic-compatible HTTP APIs.", hearth::cli::run_serve},
    {"convert", "Quantize a Hugging Face checkpoint to MLX affine 2-8 bit (mlx_lm.convert -q), or write it as GGUF.",
     hearth::cli::run_convert},
    {"bench", "Measure prefill/decode speed against the memory-bandwidth roofline; record it.", hearth::cli::run_bench},
    {"evals", "List the runs hearth bench recorded.", hearth::cli::run_evals},
    {"knobs", "List the environment variables Hearth reads.", hearth::cli::run_knobs},
};

void print_help() {
  std::printf(
      "usage: hearth [serve flags]\n"
      "       hearth <verb> [flags]\n\n"
      "Hearth runs Hugging Face checkpoints (Llama, Mistral, Qwen2, Qwen3) on this machine.\n\n"
      "Bare `hearth` (no verb, only flags) is `hearth serve`: it serves the model named by --model,\n"
      "else the largest model in the Hugging Face cache that fits in memory, else the bundled demo\n"
      "model, with a chat UI at http://127.0.0.1:8080/ (`hearth serve --help` has the flags).\n\n"
      "verbs:\n");
  for (const Verb& v : kVerbs) std::printf("  %-10s %s\n", v.name, v.summary);
  std::printf("\n`hearth <verb> --help` shows a verb's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    print_help();
    return 0;
  }
  try {
    // No verb: `hearth` and `hearth --port 9000 --open` serve.
    if (args.empty() || args[0].rfind("-", 0) == 0) return hearth::cli::run_serve(args);
    for (const Verb& v : kVerbs) {
      if (args[0] == v.name) return v.run(std::vector<std::string>(args.begin() + 1, args.end()));
    }
    std::fprintf(stderr, "hearth: unknown verb '%s' (see hearth --help)\n", args[0].c_str());
    return 2;
  } catch (const hearth::InputError& e) {
    std::fprintf(stderr, "hearth: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hearth: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth: internal error: %s\n", e.what());
    return 3;
  }
}
