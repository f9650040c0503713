// libFuzzer target: JsonConfig::parse plus the typed getters the model loaders use, and the MLX
// quantization section they read through it. Malformed input must end as an InputError with a
// one-line message; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "formats/json_config.h"
#include "formats/quant_config.h"
#include "fuzz_checks.h"

// Each getter either returns or throws an InputError (wrong type, missing key).
using hearth::fuzz::check_one_line;
using hearth::fuzz::expect_clean;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const hearth::JsonConfig c = hearth::JsonConfig::parse(text, "fuzz");
    for (const char* key : {"hidden_size", "rope_scaling", "eos_token_id", "weight_map", "layer_types", "a"}) {
      expect_clean([&] { (void)c.has(key); });
      expect_clean([&] { (void)c.get_int(key); });
      expect_clean([&] { (void)c.get_int(key, 1); });
      expect_clean([&] { (void)c.get_float(key); });
      expect_clean([&] { (void)c.get_float_opt(key); });
      expect_clean([&] { (void)c.get_bool(key, false); });
      expect_clean([&] { (void)c.get_string(key); });
      expect_clean([&] { (void)c.get_int_list(key); });
      expect_clean([&] { (void)c.get_string_list(key); });
      expect_clean([&] {
        if (auto o = c.object(key)) {
          (void)o->string_items();
          (void)o->get_float_opt("factor");
        }
      });
    }
    expect_clean([&] { (void)c.string_items(); });
    expect_clean([&] {
      const hearth::QuantConfig q = hearth::QuantConfig::from_config(c);
      for (const char* module : {"model.embed_tokens", "lm_head", "model.layers.0.mlp.down_proj"})
        (void)q.spec_for(module);
    });
  } catch (const hearth::InputError& e) {
    check_one_line(e);
  }
  return 0;
}
