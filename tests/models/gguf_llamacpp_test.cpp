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

}  // namespace
}  // namespace hearth
