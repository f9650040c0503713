// What every fuzz target asks of a rejected input: it ends as an InputError whose message is one
// line (the CLI prints it, the server puts it in a JSON body). Anything else ends the run.
#pragma once

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace hearth::fuzz {

inline void check_one_line(const InputError& e) {
  if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
}

// Runs f: an InputError is an expected outcome; any other exception escapes and ends the run.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    check_one_line(e);
  }
}

}  // namespace hearth::fuzz
