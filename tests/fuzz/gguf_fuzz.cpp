// libFuzzer target: the GGUF parser, metadata getters and row dequantizers. Malformed input must
// end as an InputError with a one-line message; a crash, a sanitizer report or any other
// exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/ggml_quants.h"
#include "formats/gguf.h"
#include "fuzz_checks.h"

namespace {

void touch_metadata(const hearth::GgufMetadata& m) {
  for (const auto& [key, value] : m.entries()) {
    // Each getter either returns or throws a FileError; which depends on the value's type.
    try {
      (void)m.get_int(key);
    } catch (const hearth::FileError&) {
    }
    try {
      (void)m.get_float(key);
    } catch (const hearth::FileError&) {
    }
    try {
      (void)m.get_string(key);
    } catch (const hearth::FileError&) {
    }
    try {
      (void)m.get_int_array(key);
    } catch (const hearth::FileError&) {
    }
    try {
      (void)m.get_float_array(key);
    } catch (const hearth::FileError&) {
    }
    try {
      (void)m.get_string_array(key);
    } catch (const hearth::FileError&) {
    }
    if (const auto* a = value.get_if<hearth::GgufArray>(); a != nullptr && a->size() > 0) (void)a->at(a->size() - 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hearth::GgufHeader h = hearth::parse_gguf(data, size, "fuzz");
    touch_metadata(h.metadata);
    // What the parser accepted must be in bounds and in order.
    // (Without tensors the data section may be absent: data_offset is then the file size.)
    if (h.data_offset > size || (!h.tensors.empty() && h.data_offset % h.alignment != 0)) std::abort();
    uint64_t end = 0;
    for (const hearth::GgufTensorInfo& t : h.tensors) {
      if (t.offset < end || t.offset % h.alignment != 0 || t.offset + t.nbytes > size - h.data_offset) std::abort();
      if (t.numel() < 0 || hearth::row_bytes(t.type, t.ne[0]) * (t.ne[0] ? t.numel() / t.ne[0] : 0) != t.nbytes)
        std::abort();
      end = t.offset + t.nbytes;
      // Decode the first row of each tensor Hearth supports (reads exactly row_bytes).
      if (hearth::ggml_type_supported(t.type) && t.ne[0] > 0 && t.numel() > 0 && t.ne[0] <= (1 << 16)) {
        std::vector<float> row(static_cast<size_t>(t.ne[0]));
        hearth::dequantize_row(t.type, data + h.data_offset + t.offset, row.data(), t.ne[0]);
      }
    }
  } catch (const hearth::InputError& e) {
    // Errors are printed as one line (CLI) or put in an HTTP body: no raw newlines.
    hearth::fuzz::check_one_line(e);
  }
  return 0;
}
