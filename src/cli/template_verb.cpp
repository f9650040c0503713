// hearth template: renders the model's chat template for one JSON request read from stdin
// and prints the prompt exactly (no trailing newline added).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "runtime/model_tokenizer.h"
#include "runtime/prompt.h"

namespace hearth::cli {

int run_template(const std::vector<std::string>& args) {
  std::string model;
  Flags f("template", "[MODEL] < request.json",
          "Reads one JSON object {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true, ...}\n"
          "from stdin and prints the prompt the model's chat template renders. Other keys\n"
          "(e.g. \"enable_thinking\": false) are passed to the template as variables.");
  f.model_dir("Directory with tokenizer_config.json (or chat_template.jinja) and tokenizer.json, or a GGUF file.",
              &model);
  if (!f.parse(args)) return 0;
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const nlohmann::ordered_json request = parse_request_json(text, "stdin");
  const Tokenizer tok = load_tokenizer(model);
  const PromptRenderer renderer(tok);
  const std::string prompt = renderer.render(request);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

}  // namespace hearth::cli
