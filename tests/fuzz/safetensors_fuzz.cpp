// libFuzzer target: the safetensors header parser. Malformed input must end as an InputError
// with a one-line message; a crash, a sanitizer report or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "formats/safetensors.h"
#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hearth::SafetensorsHeader h = hearth::parse_safetensors(data, size, "fuzz");
    // What the parser accepted must be in bounds: the tensors tile the data section.
    uint64_t end = 0;
    for (const hearth::SafetensorsEntry& e : h.tensors) {
      if (e.begin != end || e.end < e.begin) std::abort();
      end = e.end;
    }
    if (h.data_offset + end != size) std::abort();
  } catch (const hearth::InputError& e) {
    // Errors are printed as one line (CLI) or put in an HTTP body: no raw newlines.
    hearth::fuzz::check_one_line(e);
  }
  return 0;
}
