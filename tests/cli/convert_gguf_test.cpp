// hearth convert --to gguf: each type's file loads back as a model giving the safetensors
// checkpoint's logits within the type's bound, with llama.cpp's tensor types (Q6_K / Q8_0
// output under q4_0, F32 norms); the Q6_K quantizer against its bound; flags it does not
// implement, a non-empty destination and broken inputs are one-line errors that leave nothing
// behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/ggml_quants.h"
#include "formats/gguf.h"
#include "models/model.h"
#include "models/model_runs.h"
#include "test_util.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

// A parity fixture with the tiny tokenizer, in a fresh directory.
std::unique_ptr<testing::TempDir> model_dir(const std::string& fixture) {
  auto dir = std::make_unique<testing::TempDir>();
  for (const std::string& src : {"parity/" + fixture, std::string("tiny_tokenizer")})
    for (const auto& e : fs::directory_iterator(testing::data_path(src))) fs::copy(e.path(), dir->path());
  return dir;
}

std::string convert(const std::string& args, int* status, std::string* err) {
  return testing::run_hearth("convert " + args, status, err);
}

void expect_one_line_error(int status, const std::string& err, const std::string& needle) {
  EXPECT_EQ(status, 1) << err;
  EXPECT_EQ(err.rfind("hearth: error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << err;
}

struct Case {
  std::string fixture, type;
  GgmlType matrix, output;  // attn_q's type and output.weight's
  double max_mean_kl;       // against the f32 checkpoint (docs/numerics.md)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "_" << c.type; }

class ConvertGguf : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertGguf, RoundTripsThroughTheLoader) {
  const Case& c = GetParam();
  const auto dir = model_dir(c.fixture);
  testing::TempDir out;
  const std::string path = out.file("model.gguf");
  int status = -1;
  std::string err;
  const std::string msg = convert(dir->path() + " --to gguf --type " + c.type + " --out " + path, &status, &err);
  ASSERT_EQ(status, 0) << err;
  EXPECT_NE(msg.find("wrote " + path), std::string::npos) << msg;
  EXPECT_EQ(std::distance(fs::directory_iterator(out.path()), fs::directory_iterator()), 1);  // no temporary left

  auto file = GgufFile::open(path);
  EXPECT_EQ(file->find("blk.0.attn_q.weight")->type, c.matrix);
  EXPECT_EQ(file->find("output.weight")->type, c.output);
  EXPECT_EQ(file->find("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  EXPECT_EQ(file->metadata().get_string("tokenizer.ggml.pre"), "gpt-2");  // the tiny tokenizer: ByteLevel's regex
  EXPECT_EQ(file->metadata().get_int("tokenizer.ggml.eos_token_id"), 999);
  EXPECT_FALSE(file->metadata().get_bool("tokenizer.ggml.add_bos_token"));

  const std::string fixture = testing::data_path("parity/" + c.fixture);
  const auto tokens = testing::read_ids(fixture + "/reference.safetensors", "tokens");
  auto f32_model = load_model(fixture);
  auto gguf = load_model(path);
  const Tensor ref = testing::prefill_logits(*f32_model, tokens), got = testing::prefill_logits(*gguf, tokens);
  const double kl = testing::mean_kl(ref, got);
  std::printf("%s %s: mean KL %.3g\n", c.fixture.c_str(), c.type.c_str(), kl);
  EXPECT_LE(kl, c.max_mean_kl);
  if (c.type == "f16" || c.type == "bf16") {  // exactly the f16 / bf16 checkpoint's weights
    auto half_model = load_model(fixture, LoadOptions{.weight_dtype = c.type == "f16" ? DType::kF16 : DType::kBF16});
    EXPECT_LE(testing::max_abs_diff(got, testing::prefill_logits(*half_model, tokens)), 1e-5f * testing::max_abs(ref));
  }
}

// llama_bias_linear: the llama architecture (permuted q/k with biases) and an untied output.
INSTANTIATE_TEST_SUITE_P(Types, ConvertGguf,
                         ::testing::Values(Case{"llama_bias_linear", "f16", GgmlType::kF16, GgmlType::kF16, 5e-6},
                                           Case{"llama_bias_linear", "bf16", GgmlType::kBF16, GgmlType::kBF16, 2e-4},
                                           Case{"llama_bias_linear", "q8_0", GgmlType::kQ8_0, GgmlType::kQ8_0, 1e-3},
                                           // rows of 64 do not fit Q6_K's 256: Q8_0, as llama-quantize
                                           Case{"llama_bias_linear", "q4_0", GgmlType::kQ4_0, GgmlType::kQ8_0, 5e-2},
                                           Case{"mistral_swa", "q4_0", GgmlType::kQ4_0, GgmlType::kQ8_0, 5e-2}),
                         [](const auto& info) { return info.param.fixture + "_" + info.param.type; });

TEST(ConvertGgufQ6K, WithinHalfAStepOfItsScale) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> x(4 * 256), y(x.size());
  for (float& v : x) v = dist(rng);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
  x[600] = 0.5f;                                      // an outlier
  std::vector<BlockQ6_K> blocks(x.size() / 256);
  quantize_row_q6_K(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  dequantize_row(GgmlType::kQ6_K, blocks.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const BlockQ6_K& b = blocks[i / 256];
    const float step = std::fabs(f16_to_f32(b.d) * static_cast<float>(b.scales[(i % 256) / 16]));
    // Codes run -32..31: half a step, or what lies beyond the last code.
    const float bound = 0.5f * step * 1.001f + std::max(0.0f, std::fabs(x[i]) - 31.5f * step) + 1e-9f;
    ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "element " << i << ": " << x[i] << " -> " << y[i];
  }
  for (size_t i = 256; i < 512; ++i) EXPECT_EQ(y[i], 0.0f);
  EXPECT_NEAR(y[600], 0.5f, 0.5f / 31);
}

TEST(ConvertGgufErrors, FlagsItDoesNotImplementAreRefusedByName) {
  const auto dir = model_dir("qwen3");
  testing::TempDir out;
  const std::string base = dir->path() + " --to gguf --out " + out.file("m.gguf");
  int status = -1;
  std::string err;
  convert(base + " --type q4_k", &status, &err);
  expect_one_line_error(status, err, "--type 'q4_k' is not implemented (f16, bf16, q8_0, q4_0, f32 are)");
  convert(base + " --type q8_0 -q", &status, &err);
  expect_one_line_error(status, err, "--quantize does not apply to --to gguf");
  convert(base + " --mlx-path " + out.file("x"), &status, &err);
  expect_one_line_error(status, err, "--mlx-path does not apply to --to gguf");
  convert(base + " --q-bits 8", &status, &err);
  expect_one_line_error(status, err, "--q-bits does not apply to --to gguf");
  convert(dir->path() + " --to onnx --out " + out.file("m.onnx"), &status, &err);
  expect_one_line_error(status, err, "--to 'onnx' is not implemented (mlx, gguf are)");
  convert(dir->path() + " --to gguf --type q8_0", &status, &err);
  expect_one_line_error(status, err, "--out FILE.gguf is required");
  convert(dir->path() + " -q --mlx-path " + out.file("x") + " --type q8_0", &status, &err);
  expect_one_line_error(status, err, "--type and --out go with --to gguf");
  // mlx_lm.convert's flags that Hearth lacks are refused as such, not as unknown.
  for (const std::string flag : {"--dtype float16", "--q-mode mxfp4", "--upload-repo me/x", "-d", "--dequantize",
                                 "--quant-predicate mixed_3_6", "--trust-remote-code", "--dtype=bfloat16"}) {
    convert(dir->path() + " -q --mlx-path " + out.file("x") + " " + flag, &status, &err);
    expect_one_line_error(status, err,
                          "mlx_lm.convert's " + flag.substr(0, flag.find_first_of(" =")) + " is not implemented");
  }
  convert("--hf-path " + dir->path() + " " + dir->path() + " -q --mlx-path " + out.file("x"), &status, &err);
  expect_one_line_error(status, err, "SRC or --hf-path, not both");
  EXPECT_TRUE(fs::is_empty(out.path()));
}

// mlx_lm.convert's own spelling of a conversion works as is.
TEST(ConvertMlx, TakesMlxLmConvertsFlags) {
  const auto dir = model_dir("qwen3");
  testing::TempDir out;
  int status = -1;
  std::string err;
  convert("--hf-path " + dir->path() + " --mlx-path " + out.file("q") + " -q --q-bits 8 --q-group-size 32", &status,
          &err);
  ASSERT_EQ(status, 0) << err;
  auto model = load_model(out.file("q"));
  EXPECT_EQ(model->info().weight_format, "affine 8-bit/32");
}

TEST(ConvertGgufErrors, ANonEmptyDestinationIsRefused) {
  const auto dir = model_dir("qwen3");
  testing::TempDir out;
  const std::string path = out.file("m.gguf");
  std::ofstream(path) << "precious";
  int status = -1;
  std::string err;
  convert(dir->path() + " --to gguf --type q8_0 --out " + path, &status, &err);
  expect_one_line_error(status, err, "exists and is not an empty file; refusing to overwrite it");
  EXPECT_EQ(read_text_file(path), "precious");
  convert(dir->path() + " --to gguf --type q8_0 --out " + out.path(), &status, &err);  // a directory
  expect_one_line_error(status, err, "refusing to overwrite it");
  std::ofstream(path, std::ios::trunc).close();  // an empty file is replaced
  convert(dir->path() + " --to gguf --type q8_0 --out " + path, &status, &err);
  EXPECT_EQ(status, 0) << err;
  EXPECT_GT(fs::file_size(path), 1000u);
}

TEST(ConvertGgufErrors, BrokenInputsAreClearErrorsAndLeaveNothing) {
  int status = -1;
  std::string err;
  auto expect_failure = [&](const std::string& src, const std::string& needle) {
    testing::TempDir out;
    convert(src + " --to gguf --type q4_0 --out " + out.file("m.gguf"), &status, &err);
    expect_one_line_error(status, err, needle);
    EXPECT_TRUE(fs::is_empty(out.path())) << "left behind after: " << err;
  };
  auto edit_json = [](const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(read_text_file(path));
    edit(j);
    std::ofstream(path, std::ios::trunc) << j.dump();
  };
  {
    const auto dir = model_dir("qwen3");  // truncated weights
    const std::string st = dir->file("model.safetensors");
    fs::resize_file(st, fs::file_size(st) - 100);
    expect_failure(dir->path(), "model.safetensors");
  }
  {
    const auto dir = model_dir("qwen3");
    std::ofstream(dir->file("model.safetensors"), std::ios::trunc) << "not safetensors";
    expect_failure(dir->path(), "model.safetensors");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("config.json"), [](auto& j) { j.erase("num_hidden_layers"); });
    expect_failure(dir->path(), "config.json: missing key 'num_hidden_layers'");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("config.json"), [](auto& j) { j["model_type"] = "gemma3"; });
    expect_failure(dir->path(), "model_type 'gemma3' is not exported (llama, mistral, qwen2, qwen3 are)");
  }
  {
    const auto dir = model_dir("qwen3");
    std::ofstream(dir->file("config.json"), std::ios::trunc) << "{\"model_type\": ";
    expect_failure(dir->path(), "config.json: not valid JSON");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("tokenizer.json"), [](auto& j) { j["model"]["vocab"] = "none"; });
    expect_failure(dir->path(), "tokenizer.json: model.vocab is not an object");
  }
  {  // each entry at fault is named
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("tokenizer.json"), [](auto& j) { j["model"]["vocab"]["hello"] = "7"; });
    expect_failure(dir->path(), "tokenizer.json: model.vocab: token 'hello' is string, not an integer id");
    edit_json(dir->file("tokenizer.json"), [](auto& j) {
      j["model"]["vocab"]["hello"] = 7;
      j["added_tokens"][0]["id"] = nullptr;
    });
    expect_failure(dir->path(), "tokenizer.json: added_tokens[0].id is null, not an integer id");
    edit_json(dir->file("tokenizer.json"), [](auto& j) {
      j["added_tokens"][0]["id"] = 0;
      j["model"]["merges"][2] = {"a", 5};
    });
    expect_failure(dir->path(), "tokenizer.json: model.merges[2][1] is number, not a string");
  }
  {
    const auto dir = model_dir("qwen2_yarn");
    edit_json(dir->file("config.json"), [](auto& j) { j["rope_parameters"]["beta_fast"] = "fast"; });
    expect_failure(dir->path(), "config.json: unexpected value");
  }
  {
    const auto dir = model_dir("qwen3");
    fs::remove(dir->file("tokenizer.json"));
    expect_failure(dir->path(), "no tokenizer.json");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("tokenizer.json"), [](auto& j) {
      j["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}}, {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    });
    expect_failure(dir->path(), "the pre-tokenizer's regex '\\s+' is not one llama.cpp knows here");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("tokenizer.json"), [](auto& j) { j["model"]["type"] = "Unigram"; });
    expect_failure(dir->path(), "only BPE tokenizers are exported");
  }
  {
    const auto dir = model_dir("qwen3");
    edit_json(dir->file("config.json"), [](auto& j) { j["vocab_size"] = 100; });  // the tokenizer does not fit
    expect_failure(dir->path(), "outside the model's vocab_size 100");
  }
  expect_failure(testing::data_path("no_such_model"), "no_such_model");
}

}  // namespace
}  // namespace hearth
