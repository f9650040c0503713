// GGUF files that llama.cpp's own converter wrote (convert_hf_to_gguf.py, as bundled by
// node-llama-cpp 3.21.1; scripts/fixtures/llamacpp_gguf.py): the parity models with the tiny
// tokenizer, in F16 and Q8_0 (tests/data/gguf_llamacpp). Every other GGUF test reads files that
// Hearth's exporter wrote, where a mistake made the same way in writer and reader (a tensor's
// layout, q/k's row permutation, a metadata key) would pass. These are the kind of file users
// download. Each must
// - hold the tensors Hearth's exporter writes for the same checkpoint and type, byte for byte,
//   and the same hyperparameters (so the exporter writes what llama.cpp writes);
// - load as a complete model: config, generation defaults and tokenizer;
// - give the f16 checkpoint's logits (F16) or stay within Q8_0's KL bound (docs/numerics.md).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "backends/cpu/kernels.h"
#include "base/mapped_file.h"
#include "formats/gguf_model.h"
#include "formats/safetensors.h"
#include "gguf_fixture.h"
#include "model_runs.h"
#include "models/model.h"
#include "runtime/model_tokenizer.h"

namespace hearth {
namespace {

using testing::prefill_logits;

struct Case {
  std::string fixture, type;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "_" << c.type; }

std::string llamacpp_file(const Case& c) {
  return testing::data_path("gguf_llamacpp/" + c.fixture + "-" + c.type + ".gguf");
}

class LlamaCppGguf : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaCppGguf, HoldsWhatHearthWrites) {
  const Case& c = GetParam();
  auto theirs = GgufFile::open(llamacpp_file(c));
  testing::TempDir tmp;
  const GgmlType type = c.type == "f16" ? GgmlType::kF16 : GgmlType::kQ8_0;
  auto ours = GgufFile::open(testing::write_gguf_fixture(c.fixture, tmp.file("ours.gguf"), {.matrix_type = type}));
  EXPECT_EQ(theirs->tensors().size(), ours->tensors().size());
  for (const GgufTensorInfo& t : theirs->tensors()) {
    const GgufTensorInfo* o = ours->find(t.name);
    ASSERT_NE(o, nullptr) << t.name << " is not in Hearth's file";
    EXPECT_EQ(t.type, o->type) << t.name;
    EXPECT_EQ(t.shape(), o->shape()) << t.name;
    ASSERT_EQ(t.nbytes, o->nbytes) << t.name;
    EXPECT_EQ(std::memcmp(theirs->raw(t).raw(), ours->raw(*o).raw(), t.nbytes), 0) << t.name << ": bytes differ";
  }
  // The model's hyperparameters (ARCH.*) as llama.cpp writes them.
  const std::string arch = theirs->metadata().get_string("general.architecture") + ".";
  EXPECT_EQ(ours->metadata().get_string("general.architecture") + ".", arch);
  int checked = 0;
  for (const auto& [key, value] : theirs->metadata().entries()) {
    if (key.rfind(arch, 0) != 0) continue;
    const GgufValue* mine = ours->metadata().find(key);
    ASSERT_NE(mine, nullptr) << key << " is not in Hearth's file";
    EXPECT_EQ(*mine, value) << key;
    ++checked;
  }
  EXPECT_GE(checked, 9);
}

TEST_P(LlamaCppGguf, RunsAsTheSafetensorsCheckpoint) {
  const Case& c = GetParam();
  const std::string dir = testing::data_path("parity/" + c.fixture);
  const auto tokens = testing::read_ids(dir + "/reference.safetensors", "tokens");
  auto gguf = load_model(llamacpp_file(c));
  auto f32_model = load_model(dir);
  EXPECT_EQ(gguf->info().vocab_size, f32_model->info().vocab_size);
  EXPECT_EQ(gguf->info().n_layers, f32_model->info().n_layers);
  EXPECT_EQ(gguf->info().head_dim, f32_model->info().head_dim);
  EXPECT_EQ(gguf->info().generation.eos_token_ids, std::vector<int64_t>{999});  // the tiny tokenizer's <|im_end|>

  const Tensor f32 = prefill_logits(*f32_model, tokens), got = prefill_logits(*gguf, tokens);
  const float scale = testing::max_abs(f32);
  const double kl = testing::mean_kl(f32, got);
  std::printf("%s %s: mean KL %.3g\n", c.fixture.c_str(), c.type.c_str(), kl);
  if (c.type == "f16") {  // the f16 checkpoint's weights, norms in f32 in both
    auto f16_model = load_model(dir, LoadOptions{.weight_dtype = DType::kF16});
    EXPECT_LE(testing::max_abs_diff(got, prefill_logits(*f16_model, tokens)), 1e-5f * scale);
    EXPECT_LE(kl, 5e-6);
  } else {
    EXPECT_LE(kl, 1e-3);
  }

  // The tokenizer the file carries: the tiny tokenizer's vocabulary and merges, so text encodes
  // as HF's tokenizer encodes it. Its three added tokens sit at 997-999 in tokenizer.json, after a
  // gap; transformers 5 hands them to the converter renumbered after the vocabulary (277-279),
  // and the file has them there. Each is still one special token, at the file's id.
  const Tokenizer from_gguf = load_tokenizer(llamacpp_file(c));
  const Tokenizer hf = Tokenizer::load(testing::data_path("tiny_tokenizer"));
  for (const char* text : {"Hello world", "user\nhi there, 123!", "  tabs\tand\nnewlines  "}) {
    EXPECT_EQ(from_gguf.encode(text, true), hf.encode(text, true)) << text;
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    const int32_t id = from_gguf.token_to_id(special).value_or(-1);
    EXPECT_GE(id, 277) << special;
    EXPECT_TRUE(from_gguf.is_special(id)) << special;
    std::vector<int32_t> want = hf.encode("hi", false);
    want.insert(want.begin(), id);
    EXPECT_EQ(from_gguf.encode(std::string(special) + "hi", true), want) << special;
  }
  EXPECT_EQ(from_gguf.config().chat_template, hf.config().chat_template);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppGguf,
                         ::testing::Values(Case{"llama_bias_linear", "f16"}, Case{"llama_bias_linear", "q8_0"},
                                           Case{"qwen3", "f16"}, Case{"qwen3", "q8_0"}, Case{"qwen2_yarn", "f16"},
                                           Case{"qwen2_yarn", "q8_0"}),
                         [](const auto& info) { return info.param.fixture + "_" + info.param.type; });

// The weights of a qwen-family GGUF file (no q/k row permutation) dequantized to f32 by the
// scalar codec (ggml_reference_test.cpp holds it to ggml's own, bit for bit), written as the HF
// checkpoint the file stands for: a reference that runs no quantized kernel.
// With matrices_in_bf16, every matrix but the embedding table is stored rounded to bf16.
std::string dequantized_checkpoint(const std::string& gguf, const testing::TempDir& dir,
                                   bool matrices_in_bf16 = false) {
  const GgufCheckpoint ck = open_gguf_checkpoint(gguf);
  write_file_atomic(dir.file("config.json"), ck.config.dump());
  std::vector<SafetensorsWriter::Spec> specs;
  std::vector<Tensor> tensors;
  for (const GgufTensorInfo& t : ck.file->tensors()) {
    tensors.push_back(ck.file->dequantize(t));
    const std::string name = gguf_to_hf_name(t.name);
    if (matrices_in_bf16 && tensors.back().rank() == 2 && name != "model.embed_tokens.weight")
      tensors.back() = tensors.back().to(DType::kBF16);
    const Shape& shape = tensors.back().shape();
    std::vector<int64_t> dims;
    for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
    specs.push_back({name, tensors.back().dtype(), dims});
  }
  SafetensorsWriter w(dir.file("model.safetensors"), specs);
  for (const Tensor& t : tensors) w.write(t);
  w.finish();
  return dir.path();
}

// A file quantized by llama.cpp's llama-quantize code (llama_model_quantize of the prebuilt
// libllama, scripts/fixtures/llamacpp_quantize.py) to Q4_K_M: its own choice of Q4_K and Q6_K
// tensors, written by its C++ GGUF writer, of a random qwen3 model with 256-wide rows
// (make_random_model --preset tiny-256). On the K-quant kernels it gives the logits of its
// weights dequantized (docs/numerics.md).
TEST(LlamaCppQuantized, Q4KMRunsAsItsDequantizedWeights) {
  const std::string path = testing::data_path("gguf_llamacpp/tiny_256-q4_k_m.gguf");
  auto file = GgufFile::open(path);
  std::map<GgmlType, int> types;
  for (const GgufTensorInfo& t : file->tensors()) ++types[t.type];
  EXPECT_GT(types[GgmlType::kQ4_K], 0);
  EXPECT_GT(types[GgmlType::kQ6_K], 1);  // output.weight, and llama.cpp's picks for attn_v / ffn_down
  EXPECT_EQ(file->find("output.weight")->type, GgmlType::kQ6_K);

  testing::TempDir tmp;
  auto quantized = load_model(path);
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 997);
  // Where prefill takes the K-quant tiles in bf16 (AVX512-BF16), the reference holds the same
  // matrices rounded to bf16, which the dense kernel applies the same way (x rounded to bf16);
  // the embedding rows stay exact in both.
  const bool bf16_tiles =
      cpu::matmul_rounds_x_to_bf16(cpu::active_isa(), DType::kBF16, static_cast<int64_t>(tokens.size()));
  auto reference = load_model(dequantized_checkpoint(path, tmp, bf16_tiles));
  EXPECT_EQ(quantized->info().vocab_size, 1000);
  const Tensor want = prefill_logits(*reference, tokens), got = prefill_logits(*quantized, tokens);
  const double kl = testing::mean_kl(want, got);
  const float rel = testing::max_abs_diff(got, want) / testing::max_abs(want);
  std::printf("tiny_256 Q4_K_M: mean KL %.3g, max |dlogit| / max |logit| %.3g\n", kl, rel);
  // Measured 4.3e-9 and 3.7e-4 against f32 (the KV caches differ: f16 and f32), 0 and 0 against
  // the bf16 matrices: a random model's logits are flat, so a wrongly decoded block (weights off
  // by a whole step or scale) shows in the logits' size, not in the KL. On AVX2 the K-quant
  // prefill rounds x to int8 per 256 values, as the decode does (ggml_avx2.cpp): measured 1.8e-5
  // and 2.2e-2 there.
  const bool int8_x = cpu::active_isa() == cpu::Isa::kAvx2;
  EXPECT_LE(kl, int8_x ? 1e-4 : 1e-6);
  EXPECT_LE(rel, int8_x ? 5e-2 : 5e-3);
}

}  // namespace
}  // namespace hearth
