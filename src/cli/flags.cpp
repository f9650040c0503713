#include "cli/flags.h"

#include <cstdio>

#include "base/error.h"
#include "base/strings.h"

namespace hearth::cli {

void Flags::add(const std::string& name, const std::string& help, std::string* t) { specs_.push_back({name, help, t}); }
void Flags::add(const std::string& name, const std::string& help, int64_t* t) { specs_.push_back({name, help, t}); }
void Flags::add(const std::string& name, const std::string& help, double* t) { specs_.push_back({name, help, t}); }
void Flags::add(const std::string& name, const std::string& help, bool* t) { specs_.push_back({name, help, t}); }
void Flags::add(const std::string& name, const std::string& help, std::optional<double>* t) {
  specs_.push_back({name, help, t});
}
void Flags::add(const std::string& name, const std::string& help, std::optional<int64_t>* t) {
  specs_.push_back({name, help, t});
}

void Flags::positional(const std::string& name, const std::string& help, std::string* target) {
  positional_name_ = name;
  positional_help_ = help;
  positional_target_ = target;
}

void Flags::model_dir(const std::string& help, std::string* target, bool required) {
  model_target_ = target;
  positional("model", "Model directory or GGUF file (same as --model).", target);
  add("model", help, target);
  if (required) require("model");
}

void Flags::require(const std::string& name) {
  Spec* s = find(name);
  if (s != nullptr) s->required = true;
}

Flags::Spec* Flags::find(const std::string& name) {
  for (Spec& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

bool Flags::given(const std::string& name) const {
  for (const Spec& s : specs_)
    if (s.name == name) return s.seen;
  return false;
}

void Flags::set(Spec& spec, const std::string& value) {
  const std::string flag = "--" + spec.name;
  auto need_int = [&] {
    auto v = parse_int(value);
    if (!v) throw InputError(verb_ + ": " + flag + " expects an integer, got '" + value + "'");
    return *v;
  };
  auto need_double = [&] {
    auto v = parse_double(value);
    if (!v) throw InputError(verb_ + ": " + flag + " expects a number, got '" + value + "'");
    return *v;
  };
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *target = value;
        } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::optional<int64_t>>) {
          *target = need_int();
        } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::optional<double>>) {
          *target = need_double();
        } else {
          *target = true;
        }
      },
      spec.target);
  spec.seen = true;
}

void Flags::alias(const std::string& spelled, const std::string& name) { aliases_.emplace_back(spelled, name); }

void Flags::refuse(const std::string& spelled, const std::string& why) { refused_.emplace_back(spelled, why); }

bool Flags::parse(const std::vector<std::string>& args) {
  bool positional_seen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    for (const auto& [spelled, why] : refused_) {
      if (a == spelled || a.rfind(spelled + "=", 0) == 0) throw Unsupported(verb_ + ": " + why);
    }
    for (const auto& [spelled, name] : aliases_) {
      if (a == spelled) a = "--" + name;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.rfind("--", 0) != 0) {
      if (positional_target_ == nullptr || positional_seen) {
        throw InputError(verb_ + ": unexpected argument '" + a + "' (see hearth " + verb_ + " --help)");
      }
      *positional_target_ = a;
      positional_seen = true;
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Spec* spec = find(name);
    if (spec == nullptr) throw InputError(verb_ + ": unknown flag --" + name + " (see hearth " + verb_ + " --help)");
    if (spec->seen) throw InputError(verb_ + ": --" + name + " given twice");
    if (std::holds_alternative<bool*>(spec->target)) {
      if (has_value) throw InputError(verb_ + ": --" + name + " is a switch and takes no value");
      set(*spec, "");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) throw InputError(verb_ + ": --" + name + " needs a value");
      value = args[++i];
    }
    set(*spec, value);
  }
  if (model_target_ != nullptr && (positional_seen || given("model")) && model_target_->empty()) {
    throw InputError(verb_ + ": the model path is empty");
  }
  for (const Spec& s : specs_) {
    if (s.required && !s.seen) {
      if (s.name == positional_name_ && positional_seen) continue;
      throw InputError(verb_ + ": --" + s.name + " is required (see hearth " + verb_ + " --help)");
    }
  }
  return true;
}

std::string Flags::help() const {
  std::string out = "usage: hearth " + verb_ + " " + usage_ + "\n\n" + summary_ + "\n\n";
  if (positional_target_ != nullptr)
    out += "arguments:\n  " + positional_name_ + "\n      " + positional_help_ + "\n\n";
  out += "flags:\n";
  for (const Spec& s : specs_) {
    const bool is_switch = std::holds_alternative<bool*>(s.target);
    out +=
        "  --" + s.name + (is_switch ? "" : " VALUE") + (s.required ? "  (required)" : "") + "\n      " + s.help + "\n";
  }
  out += "  --help\n      Show this help.\n";
  return out;
}

}  // namespace hearth::cli
