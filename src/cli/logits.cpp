// hearth logits: one prefill over the given tokens, logits of every position to safetensors.
#include <cstdio>

#include "base/strings.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "formats/safetensors.h"
#include "runtime/engine.h"

namespace hearth::cli {

int run_logits(const std::vector<std::string>& args) {
  ModelFlags mf;
  std::string tokens_text, out_path;
  Flags f("logits", "[MODEL] --tokens IDS --out FILE.safetensors [flags]",
          "Runs one prefill over the tokens and writes tensor 'logits' [T, vocab] f32 (every position)\n"
          "and 'tokens' [T] i32 to a safetensors file.");
  mf.declare(f);
  f.add("tokens", "Comma-separated token ids, e.g. 1,2,3.", &tokens_text);
  f.require("tokens");
  f.add("out", "Output .safetensors file (written atomically).", &out_path);
  f.require("out");
  if (!f.parse(args)) return 0;

  std::vector<int32_t> ids = parse_int_list(tokens_text, "--tokens");
  if (ids.empty()) throw InputError("--tokens: no tokens given");
  auto pool = mf.make_pool();
  auto model = load_model(mf.model, mf.load_options());
  for (int32_t t : ids) {
    if (t < 0 || t >= model->info().vocab_size) {
      throw InputError("--tokens: id " + std::to_string(t) + " is outside the vocabulary of " +
                       std::to_string(model->info().vocab_size));
    }
  }
  EngineOptions eo = mf.engine_options();
  eo.kv_tokens = static_cast<int64_t>(ids.size());
  Engine engine(*model, Context{pool.get(), mf.device()}, eo);
  Sequence seq;
  seq.tokens = ids;
  const Tensor logits = engine.step({{&seq, static_cast<int64_t>(ids.size()), true}});
  write_safetensors(out_path,
                    {{"logits", logits}, {"tokens", Tensor::from_i32({static_cast<int64_t>(ids.size())}, ids.data())}});
  std::fprintf(stderr, "wrote logits %s to %s\n", logits.shape().str().c_str(), out_path.c_str());
  return 0;
}

}  // namespace hearth::cli
