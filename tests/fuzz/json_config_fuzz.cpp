// libFuzzer target: JsonConfig::parse plus the typed getters the model loaders use. Malformed
// input must end as an InputError with a one-line message; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "formats/json_config.h"

namespace {

void check_one_line(const hearth::InputError& e) {
  if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
}

// Runs one getter; an InputError (wrong type, missing key) is an expected outcome.
template <class F>
void probe(F&& f) {
  try {
    f();
  } catch (const hearth::InputError& e) {
    check_one_line(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const hearth::JsonConfig c = hearth::JsonConfig::parse(text, "fuzz");
    for (const char* key : {"hidden_size", "rope_scaling", "eos_token_id", "weight_map", "layer_types", "a"}) {
      probe([&] { (void)c.has(key); });
      probe([&] { (void)c.get_int(key); });
      probe([&] { (void)c.get_int(key, 1); });
      probe([&] { (void)c.get_float(key); });
      probe([&] { (void)c.get_float_opt(key); });
      probe([&] { (void)c.get_bool(key, false); });
      probe([&] { (void)c.get_string(key); });
      probe([&] { (void)c.get_int_list(key); });
      probe([&] { (void)c.get_string_list(key); });
      probe([&] {
        if (auto o = c.object(key)) {
          (void)o->string_items();
          (void)o->get_float_opt("factor");
        }
      });
    }
    probe([&] { (void)c.string_items(); });
  } catch (const hearth::InputError& e) {
    check_one_line(e);
  }
  return 0;
}
