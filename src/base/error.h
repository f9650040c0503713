// Errors: typed exceptions for bad input, CHECK for invariants.
#pragma once

#include <stdexcept>
#include <string>

namespace hearth {

// `message` with its control characters (a newline in a role, a tensor name, a metadata string
// quoted from the input) written as \xNN, so that it stays one line.
std::string one_line(const std::string& message);

// Bad input from the outside world (file, config, flag, request). The message is one
// line and names the offending thing; boundaries turn it into an HTTP 4xx or exit 1.
// Quoted input cannot break the line: the constructor escapes control characters.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(one_line(message)) {}
};

// Bad input inside a named file: "path: problem".
class FileError : public InputError {
 public:
  FileError(const std::string& path, const std::string& problem) : InputError(path + ": " + problem), path_(path) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A feature or argument combination we do not implement (yet); never silently ignored.
class Unsupported : public InputError {
 public:
  explicit Unsupported(const std::string& message) : InputError(message) {}
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace hearth

// Invariant checks: a failure is a bug in Hearth, not bad input. Aborts with file:line.
#define HEARTH_CHECK(cond)                                              \
  do {                                                                  \
    if (!(cond)) ::hearth::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define HEARTH_CHECK_MSG(cond, msg)                                        \
  do {                                                                     \
    if (!(cond)) ::hearth::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
#ifdef NDEBUG
#define HEARTH_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define HEARTH_DCHECK(cond) HEARTH_CHECK(cond)
#endif
