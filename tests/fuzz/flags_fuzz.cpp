// libFuzzer target: the command-line flag parser (cli/flags.h) that every verb declares its
// options with. The input is argv: its bytes split at NUL into arguments. A declaration with one
// flag of every kind (string, integer, number, switch, optional number and integer, a required
// model that may also come as the positional argument) parses them; the outcome must be a parse
// or an InputError of one line, and a successful parse must have set what it says it saw.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  hearth::fuzz::expect_clean([&] {
    hearth::cli::Flags f("fuzz", "[MODEL] [flags]", "A declaration with every kind of flag.");
    std::string model, name;
    int64_t count = 3;
    double rate = 0.5;
    bool on = false;
    std::optional<double> temp;
    std::optional<int64_t> top_k;
    f.model_dir("Model.", &model);
    f.add("name", "A string.", &name);
    f.add("count", "An integer.", &count);
    f.add("rate", "A number.", &rate);
    f.add("on", "A switch.", &on);
    f.add("temp", "An optional number.", &temp);
    f.add("top-k", "An optional integer.", &top_k);
    if (f.help().find("--top-k VALUE") == std::string::npos) std::abort();
    if (!f.parse(args)) return;       // --help
    if (model.empty()) std::abort();  // required (as a flag or the argument), and never empty
    if (f.given("temp") != temp.has_value() || f.given("top-k") != top_k.has_value()) std::abort();
    if (!f.given("on") && on) std::abort();
  });
  return 0;
}
