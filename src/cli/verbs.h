// One function per verb; each parses its own flags from args (after the verb name) and
// returns the process exit code. Bad input throws InputError (main prints it).
#pragma once

#include <string>
#include <vector>

namespace hearth::cli {

int run_generate(const std::vector<std::string>& args);
int run_logits(const std::vector<std::string>& args);
int run_knobs(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args);
int run_template(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_convert(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_evals(const std::vector<std::string>& args);

}  // namespace hearth::cli
