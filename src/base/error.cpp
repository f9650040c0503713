#include "base/error.h"

#include <cstdio>
#include <cstdlib>

#include "base/strings.h"

namespace hearth {

std::string one_line(const std::string& message) {
  for (const char c : message) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return printable(message, std::string::npos);
  }
  return message;
}

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "hearth: internal error at %s:%d: CHECK(%s) failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hearth
