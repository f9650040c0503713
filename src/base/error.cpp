#include "base/error.h"

#include <cstdio>
#include <cstdlib>

namespace hearth {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "hearth: internal error at %s:%d: CHECK(%s) failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hearth
