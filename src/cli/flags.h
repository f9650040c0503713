// Typed command-line flags. A verb declares its options once (name, help, target); parsing,
// `--help` text and "unknown flag" errors all come from that declaration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hearth::cli {

class Flags {
 public:
  Flags(std::string verb, std::string usage, std::string summary)
      : verb_(std::move(verb)), usage_(std::move(usage)), summary_(std::move(summary)) {}

  void add(const std::string& name, const std::string& help, std::string* target);
  void add(const std::string& name, const std::string& help, int64_t* target);
  void add(const std::string& name, const std::string& help, double* target);
  void add(const std::string& name, const std::string& help, bool* target);  // a switch, takes no value
  void add(const std::string& name, const std::string& help, std::optional<double>* target);
  void add(const std::string& name, const std::string& help, std::optional<int64_t>* target);
  // Up to one positional argument (e.g. the model), with its help.
  void positional(const std::string& name, const std::string& help, std::string* target);
  void require(const std::string& name);
  // An argument spelled exactly `spelled` (say "-q") stands for --name.
  void alias(const std::string& spelled, const std::string& name);
  // A flag this verb knows and does not implement (another tool's, say): `spelled` ("--x" or
  // "-x"), alone or as --x=VALUE, throws Unsupported("<verb>: <why>") rather than "unknown flag".
  void refuse(const std::string& spelled, const std::string& why);
  // The model (a directory or a GGUF file), as a positional argument or --model; required
  // unless `required` is false; never empty.
  void model_dir(const std::string& help, std::string* target, bool required = true);

  // Parses argv (after the verb). Returns false when --help was printed. Throws InputError
  // for unknown flags, missing values, malformed numbers and missing required flags.
  bool parse(const std::vector<std::string>& args);
  std::string help() const;
  bool given(const std::string& name) const;

 private:
  using Target = std::variant<std::string*, int64_t*, double*, bool*, std::optional<double>*, std::optional<int64_t>*>;
  struct Spec {
    std::string name;
    std::string help;
    Target target;
    bool required = false;
    bool seen = false;
  };
  Spec* find(const std::string& name);
  void set(Spec& spec, const std::string& value);

  std::string verb_, usage_, summary_;
  std::vector<Spec> specs_;
  std::vector<std::pair<std::string, std::string>> aliases_, refused_;  // (spelled, name or why)
  std::string positional_name_, positional_help_;
  std::string* positional_target_ = nullptr;
  std::string* model_target_ = nullptr;  // model_dir's: given, it may not be empty
};

}  // namespace hearth::cli
