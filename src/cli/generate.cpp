// hearth generate: one-shot generation from prompt token ids through the engine's stream.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/timer.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "runtime/generation.h"
#include "runtime/model_tokenizer.h"
#include "runtime/prompt.h"

namespace hearth::cli {

int run_generate(const std::vector<std::string>& args) {
  ModelFlags mf;
  std::string prompt_tokens, prompt, system;
  bool raw = false;
  int64_t max_tokens = 256, seed = 0, prefill_chunk = 512, ctx_tokens = 0;
  std::optional<double> temp, top_p;
  std::optional<int64_t> top_k;
  bool ignore_eos = false, json_out = false;
  Flags f("generate", "[MODEL] (--prompt TEXT | --prompt-tokens IDS) [flags]",
          "Generates from a prompt and streams the text. --prompt is rendered through the model's chat\n"
          "template as a user message (--raw sends it verbatim); --prompt-tokens takes token ids and\n"
          "prints token ids.");
  mf.declare(f);
  f.add("prompt", "Prompt text (a user message, unless --raw).", &prompt);
  f.add("system", "System message placed before the prompt (chat template only).", &system);
  f.add("raw", "Send --prompt verbatim, without the chat template.", &raw);
  f.add("prompt-tokens", "Prompt as comma-separated token ids, e.g. 1,2,3.", &prompt_tokens);
  f.add("max-tokens", "Most tokens to generate (default 256).", &max_tokens);
  f.add("temp", "Sampling temperature; 0 = greedy (default: generation_config.json, else 0).", &temp);
  f.add("top-p", "Nucleus sampling threshold in (0, 1] (default: generation_config.json, else 1).", &top_p);
  f.add("top-k", "Keep the k most likely tokens; 0 = off (default: generation_config.json, else 0).", &top_k);
  f.add("seed", "Random seed for sampling (default 0).", &seed);
  f.add("ignore-eos", "Keep generating past end-of-sequence tokens.", &ignore_eos);
  f.add("prefill-chunk", "Prompt tokens per forward pass (default 512).", &prefill_chunk);
  f.add("ctx", "KV cache capacity in tokens (default: the model's context, at most 4096).", &ctx_tokens);
  f.add("json", "Print one JSON object with the tokens and timings.", &json_out);
  if (!f.parse(args)) return 0;

  check_sampling_flags(temp, top_p, top_k);
  if (ctx_tokens < 0) throw InputError("--ctx must be >= 0");
  if (f.given("prompt") == f.given("prompt-tokens"))
    throw InputError("generate: give exactly one of --prompt and --prompt-tokens");
  if ((raw || f.given("system")) && !f.given("prompt")) throw InputError("generate: --raw and --system need --prompt");
  if (raw && f.given("system")) throw InputError("generate: --system needs the chat template; drop --raw");

  GenerationRequest req;
  req.max_tokens = max_tokens;
  req.ignore_eos = ignore_eos;
  req.prefill_chunk = prefill_chunk;

  const Timer load_timer;
  auto pool = mf.make_pool();
  auto model = load_model(mf.model, mf.load_options());
  std::optional<Tokenizer> tokenizer;
  if (f.given("prompt")) {
    tokenizer = load_tokenizer(mf.model);
    if (raw) {
      req.prompt = tokenizer->encode(prompt, /*add_special_tokens=*/true);
    } else {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
      messages.push_back({{"role", "user"}, {"content", prompt}});
      req.prompt = PromptRenderer(*tokenizer).encode_chat({{"messages", messages}, {"add_generation_prompt", true}});
    }
  } else {
    req.prompt = parse_int_list(prompt_tokens, "--prompt-tokens");
  }
  const double load_seconds = load_timer.seconds();
  const GenerationConfig& gen = model->info().generation;
  req.eos_ids = stop_token_ids(gen.eos_token_ids, tokenizer ? &*tokenizer : nullptr);
  // Sampling defaults: flag, then generation_config.json (when it samples), then greedy.
  const bool model_samples = gen.do_sample.value_or(false);
  req.sampling.temperature = static_cast<float>(temp.value_or(model_samples ? gen.temperature.value_or(1.0) : 0.0));
  req.sampling.top_p = static_cast<float>(top_p.value_or(model_samples ? gen.top_p.value_or(1.0) : 1.0));
  req.sampling.top_k = top_k.value_or(model_samples ? gen.top_k.value_or(0) : 0);
  req.sampling.seed = static_cast<uint64_t>(seed);

  EngineOptions eo = mf.engine_options();
  eo.kv_tokens = ctx_tokens;
  Engine engine(*model, Context{pool.get(), mf.device()}, eo);
  GenerationStream stream(engine, req);
  std::vector<int32_t> out;
  std::optional<StreamingDecoder> detok;
  if (tokenizer) detok.emplace(*tokenizer, /*skip_special_tokens=*/true);
  std::string text;
  auto emit = [&](const std::string& piece) {
    text += piece;
    if (!json_out) std::fwrite(piece.data(), 1, piece.size(), stdout);
  };
  while (auto ev = stream.next()) {
    out.push_back(ev->token);
    if (detok) {
      emit(detok->push(ev->token));
    } else if (!json_out) {
      std::printf("%s%d", out.size() == 1 ? "" : " ", ev->token);
    }
    std::fflush(stdout);
  }
  if (detok) emit(detok->flush());
  const GenerationStats& st = stream.stats();
  const double decode_rate =
      st.generated_tokens > 1 ? static_cast<double>(st.generated_tokens - 1) / st.decode_seconds : 0.0;
  const double prefill_rate = st.prefill_seconds > 0 ? static_cast<double>(st.prompt_tokens) / st.prefill_seconds : 0.0;
  if (json_out) {
    nlohmann::json j;
    j["tokens"] = out;
    if (tokenizer) j["text"] = text;
    j["prompt_tokens"] = st.prompt_tokens;
    j["generated_tokens"] = st.generated_tokens;
    j["finish_reason"] = std::string(finish_reason_name(stream.finish_reason()));
    j["load_seconds"] = load_seconds;
    j["ttft_seconds"] = st.prefill_seconds;
    j["decode_seconds"] = st.decode_seconds;
    j["prefill_tokens_per_second"] = prefill_rate;
    j["decode_tokens_per_second"] = decode_rate;
    j["peak_rss_bytes"] = peak_rss_bytes();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "prompt: %lld tokens, %.1f tok/s | generation: %lld tokens, %.1f tok/s | peak memory %s\n",
                 static_cast<long long>(st.prompt_tokens), prefill_rate, static_cast<long long>(st.generated_tokens),
                 decode_rate, format_bytes(peak_rss_bytes()).c_str());
  }
  return 0;
}

}  // namespace hearth::cli
