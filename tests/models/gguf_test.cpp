// GGUF files are complete models: each parity fixture, written as llama.cpp's converter writes
// it (tests/models/gguf_fixture.h), loads through load_model(FILE.gguf) and gives the logits of
// the safetensors checkpoint: F32 tightly, F16 as the f16 checkpoint, Q8_0 / Q4_0 within the
// KL bounds of docs/numerics.md. Plus the errors malformed files give.
#include <gtest/gtest.h>

#include <fstream>

#include "gguf_fixture.h"
#include "model_runs.h"
#include "models/dense_decoder.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"

namespace hearth {
namespace {

using testing::greedy;
using testing::prefill_logits;

struct Case {
  GgmlType type;
  double max_mean_kl;  // against the f32 safetensors model; docs/numerics.md
};
void PrintTo(const Case& c, std::ostream* os) { *os << ggml_type_name(c.type); }

class GgufModel : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(GgufModel, RunsAsTheSafetensorsCheckpoint) {
  const auto& [name, c] = GetParam();
  const std::string dir = testing::data_path("parity/" + name);
  const auto tokens = testing::read_ids(dir + "/reference.safetensors", "tokens");
  testing::TempDir tmp;
  const std::string path = testing::write_gguf_fixture(name, tmp.file(name + ".gguf"), {.matrix_type = c.type});
  auto gguf = load_model(path);
  auto f32_model = load_model(dir);
  EXPECT_EQ(gguf->info().dir, path);
  EXPECT_EQ(gguf->info().vocab_size, f32_model->info().vocab_size);
  EXPECT_EQ(gguf->info().n_layers, f32_model->info().n_layers);
  EXPECT_EQ(gguf->info().head_dim, f32_model->info().head_dim);
  EXPECT_EQ(gguf->info().generation.eos_token_ids, std::vector<int64_t>{999});  // the tiny tokenizer's <|im_end|>
  const Tensor f32 = prefill_logits(*f32_model, tokens);
  const Tensor got = prefill_logits(*gguf, tokens);
  const float scale = testing::max_abs(f32);
  const double kl = testing::mean_kl(f32, got);
  const float diff = testing::max_abs_diff(got, f32);
  std::printf("%s %s: mean KL %.3g, max |dlogit| / max |logit| %.3g\n", name.c_str(), ggml_type_name(c.type).data(), kl,
              diff / scale);
  const auto& dec = dynamic_cast<const DenseDecoder&>(*gguf);
  if (c.type == GgmlType::kF32) {
    // The same weights (q/k rows restored exactly); only Llama 3's rope_freqs divisors round
    // differently from transformers' formula.
    EXPECT_LE(diff, 1e-5f * scale);
    EXPECT_EQ(greedy(*gguf, tokens, 8), greedy(*f32_model, tokens, 8));
  } else if (c.type == GgmlType::kF16 || c.type == GgmlType::kBF16) {
    // As the f16 / bf16 checkpoint: the same rounded weights, norms in f32 in both.
    const DType dtype = c.type == GgmlType::kF16 ? DType::kF16 : DType::kBF16;
    auto half_model = load_model(dir, LoadOptions{.weight_dtype = dtype});
    EXPECT_EQ(dec.attention(0).q.weight.dtype(), dtype);
    EXPECT_LE(testing::max_abs_diff(got, prefill_logits(*half_model, tokens)), 1e-5f * scale);
    EXPECT_LE(kl, dtype == DType::kF16 ? 5e-6 : 2e-4);  // the f16 / bf16 weights' rows of docs/numerics.md
    EXPECT_LE(diff, (dtype == DType::kF16 ? 1e-2f : 4e-2f) * scale);
  } else {
    // Q4_0 and Q8_0 load as symmetric affine codes (the affine kernels), the K-quants as blocks.
    const QuantizedMatrix& qw = dec.attention(0).q.qweight;
    EXPECT_TRUE(c.type == GgmlType::kQ4_0 || c.type == GgmlType::kQ8_0 ? qw.symmetric() : qw.is_ggml());
    EXPECT_EQ(qw.ggml_type, c.type);
    EXPECT_LT(gguf->info().weight_bytes, f32_model->info().weight_bytes);
    EXPECT_LE(kl, c.max_mean_kl);
    // Decode (one row of x) agrees with prefill (the tiled kernels).
    testing::expect_greedy_is_prefill_argmax(*gguf, std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), 8, 1e-3f);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufModel,
                         ::testing::Combine(::testing::ValuesIn(testing::parity_fixtures()),
                                            ::testing::Values(Case{GgmlType::kF32, 0}, Case{GgmlType::kF16, 0},
                                                              Case{GgmlType::kBF16, 0}, Case{GgmlType::kQ8_0, 1e-3},
                                                              Case{GgmlType::kQ4_0, 5e-2})),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(ggml_type_name(std::get<1>(info.param).type));
                         });

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    load_model(path);
    ADD_FAILURE() << "loaded; expected an error containing '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(GgufModelErrors, MalformedFilesAreClearErrors) {
  testing::TempDir tmp;
  const std::string path = tmp.file("bad.gguf");
  using testing::GgufKv;
  auto write = [&](std::function<void(GgufKv&)> edit,
                   std::function<std::optional<GgmlType>(const std::string&)> type_for = {}) {
    return testing::write_gguf_fixture("qwen3", path, {.edit_metadata = edit, .type_for = type_for});
  };
  expect_load_error(write([](GgufKv& kv) { testing::erase_kv(kv, "qwen3.block_count"); }),
                    "metadata key 'qwen3.block_count'");
  expect_load_error(write([](GgufKv& kv) { testing::set_kv(kv, "general.architecture", "falcon"); }),
                    "general.architecture 'falcon' is not supported (llama, qwen2, qwen3 are)");
  expect_load_error(write([](GgufKv& kv) { testing::erase_kv(kv, "general.architecture"); }), "'general.architecture'");
  expect_load_error(write([](GgufKv& kv) { testing::set_kv(kv, "qwen3.block_count", "two"); }),
                    "metadata key 'qwen3.block_count': expected an integer, got string");
  expect_load_error(write([](GgufKv& kv) { testing::set_kv(kv, "qwen3.attention.head_count", uint32_t{0}); }),
                    "'qwen3.attention.head_count' must be positive");
  // The metadata and the tensors disagree: the error names the file's tensor and both shapes.
  expect_load_error(write([](GgufKv& kv) { testing::set_kv(kv, "qwen3.feed_forward_length", uint32_t{128}); }),
                    "bad.gguf: tensor 'blk.0.ffn_gate.weight' has shape [160, 64], expected [128, 64]");
  expect_load_error(write({},
                          [](const std::string& n) {
                            return n == "blk.1.ffn_down.weight" ? std::optional(GgmlType::kQ5_0) : std::nullopt;
                          }),
                    "tensor 'blk.1.ffn_down.weight' has ggml type Q5_0, which Hearth does not load");
  // A quantized tensor of the wrong shape names its logical shape.
  expect_load_error(write([](GgufKv& kv) { testing::set_kv(kv, "qwen3.embedding_length", uint32_t{96}); },
                          [](const std::string& n) {
                            return n == "token_embd.weight" ? std::optional(GgmlType::kQ8_0) : std::nullopt;
                          }),
                    "tensor 'token_embd.weight' is Q8_0 [1000, 64], expected [1000, 96]");
  // A missing tensor is named as the file names it.
  expect_load_error(testing::write_gguf_fixture("qwen3", path, {.drop = "blk.1.ffn_up.weight"}),
                    "bad.gguf: missing tensor 'blk.1.ffn_up.weight'");
  expect_load_error(tmp.file("missing.gguf"), "missing.gguf");
  {
    std::ofstream(tmp.file("not.gguf")) << "{\"model_type\": \"llama\"}";
    expect_load_error(tmp.file("not.gguf"), "not.gguf");
  }
}

// Every verb takes the GGUF file where it takes a model directory: the qwen3 fixture with the
// tiny tokenizer's vocabulary and chat template behaves as the directory with the same files.
TEST(GgufCli, VerbsTakeAGgufFile) {
  testing::TempDir tmp;
  const std::string gguf = testing::write_gguf_fixture("qwen3", tmp.file("tiny.gguf"));
  const auto dir = testing::make_tiny_model_dir();
  auto same = [&](const std::string& verb, const std::string& rest, const std::string& input) {
    int s1 = -1, s2 = -1;
    std::string e1, e2;
    const std::string a = testing::run_hearth(verb + " " + gguf + " " + rest, input, &s1, &e1);
    const std::string b = testing::run_hearth(verb + " " + dir->path() + " " + rest, input, &s2, &e2);
    EXPECT_EQ(s1, 0) << verb << ": " << e1;
    EXPECT_EQ(s2, 0) << verb << ": " << e2;
    return std::make_pair(a, b);
  };
  {
    const auto [a, b] = same("generate", "--prompt 'hello there' --max-tokens 6 --ignore-eos --json", "");
    const auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
    EXPECT_EQ(ja["tokens"], jb["tokens"]);
    EXPECT_EQ(ja["text"], jb["text"]);
    EXPECT_EQ(ja["prompt_tokens"], jb["prompt_tokens"]);
    EXPECT_EQ(ja["generated_tokens"], 6);
  }
  {
    const auto [a, b] = same("generate", "--prompt-tokens 5,6,7 --max-tokens 4 --ignore-eos", "");
    EXPECT_EQ(a, b);
  }
  {
    const auto [a, b] = same("tokenize", "", "{\"text\": \"<|im_start|>user Hello, world!\"}\n");
    EXPECT_EQ(a, b);
    EXPECT_NE(a.find("\"ids\""), std::string::npos) << a;
  }
  {
    const auto [a, b] =
        same("template", "", R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
    EXPECT_EQ(a, b);
    EXPECT_NE(a.find("<|im_start|>assistant"), std::string::npos) << a;
  }
  for (const std::string& model : {gguf, dir->path()}) {
    int status = -1;
    std::string err;
    testing::run_hearth("logits " + model + " --tokens 1,2,3 --out " + tmp.file(model == gguf ? "a.st" : "b.st"),
                        &status, &err);
    EXPECT_EQ(status, 0) << err;
  }
  EXPECT_EQ(testing::max_abs_diff(testing::read_tensor(tmp.file("a.st"), "logits"),
                                  testing::read_tensor(tmp.file("b.st"), "logits")),
            0.0f);
  {
    // bench reads the footprint from the loaded model: the same params and bytes per token.
    const std::string flags = "--prompt-tokens 8 --gen-tokens 4 --reps 1 --json --no-record --bandwidth-mib 64";
    const auto [a, b] = same("bench", flags, "");
    const auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
    EXPECT_EQ(ja["model"]["params"], jb["model"]["params"]);
    EXPECT_EQ(ja["roofline"]["weight_bytes_per_token"], jb["roofline"]["weight_bytes_per_token"]);
  }
  int status = 0;
  std::string err;
  testing::run_hearth("generate " + tmp.file("absent.gguf") + " --prompt-tokens 1", &status, &err);
  EXPECT_EQ(status, 1);
  EXPECT_NE(err.find("hearth: error: "), std::string::npos) << err;
}

}  // namespace
}  // namespace hearth
