// MLX affine-quantized models, made by `hearth convert -q` from the parity fixtures, load
// through the same path as any checkpoint and stay close to the f32 model: mean KL bounds per
// bit width are in docs/numerics.md. Plus the errors a malformed quantized model gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model_runs.h"
#include "models/dense_decoder.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "test_util.h"

namespace hearth {
namespace {

using testing::greedy;
using testing::prefill_logits;

namespace fs = std::filesystem;

// `hearth convert DIR -q --q-bits B --q-group-size G --mlx-path OUT` (the fixture's
// reference.safetensors is not a weight file and is left behind).
std::string convert(const std::string& dir, int bits, int group, const std::string& out) {
  int status = 0;
  std::string err;
  testing::run_hearth("convert " + dir + " -q --q-bits " + std::to_string(bits) + " --q-group-size " +
                          std::to_string(group) + " --mlx-path " + out,
                      &status, &err);
  EXPECT_EQ(status, 0) << err;
  return out;
}

struct Bound {
  int bits;
  double max_mean_kl;
};
void PrintTo(const Bound& b, std::ostream* os) { *os << b.bits << "bit"; }

class Quantized : public ::testing::TestWithParam<std::tuple<std::string, Bound>> {};

TEST_P(Quantized, ConvertedModelRunsCloseToF32) {
  const auto& [name, bound] = GetParam();
  const std::string dir = testing::data_path("parity/" + name);
  const auto tokens = testing::read_ids(dir + "/reference.safetensors", "tokens");
  auto f32_model = load_model(dir);
  const Tensor f32 = prefill_logits(*f32_model, tokens);
  testing::TempDir tmp;
  auto q = load_model(convert(dir, bound.bits, 32, tmp.path() + "/q"));
  const auto& dec = dynamic_cast<const DenseDecoder&>(*q);
  EXPECT_TRUE(dec.attention(0).q.qweight.defined()) << "linear layers are quantized";
  EXPECT_EQ(dec.attention(0).q.qweight.spec, (QuantSpec{bound.bits, 32}));
  EXPECT_LT(q->info().weight_bytes, f32_model->info().weight_bytes);
  const double kl = testing::mean_kl(f32, prefill_logits(*q, tokens));
  std::printf("%s %d-bit: mean KL %.3g\n", name.c_str(), bound.bits, kl);
  EXPECT_LE(kl, bound.max_mean_kl);
  // Greedy tokens equal the f32 model's wherever the f32 model's top-2 margin is clear of
  // the quantization noise (checked until the first step where it is not).
  const auto want = testing::read_ids(dir + "/reference.safetensors", "greedy");
  const std::vector<int32_t> got = greedy(*q, tokens, static_cast<int64_t>(want.size()));
  std::vector<int32_t> ctx = tokens;
  ctx.insert(ctx.end(), want.begin(), want.end() - 1);
  const Tensor f32_all = prefill_logits(*f32_model, ctx);
  const int64_t vocab = f32_all.dim(1);
  const float min_margin = bound.bits == 8 ? 0.2f : 1.0f;
  size_t checked = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    std::vector<float> row(f32_all.data<float>() + (tokens.size() - 1 + i) * static_cast<size_t>(vocab),
                           f32_all.data<float>() + (tokens.size() + i) * static_cast<size_t>(vocab));
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    if (row[0] - row[1] < min_margin) break;
    EXPECT_EQ(got[i], want[i]) << name << " step " << i << " (f32 margin " << row[0] - row[1] << ")";
    if (got[i] != want[i]) break;
    ++checked;
  }
  std::printf("%s %d-bit: greedy equal for the first %zu of %zu steps with a clear margin\n", name.c_str(), bound.bits,
              checked, want.size());

  // Decoding (the decode kernel) agrees with the prefill path (the tiled kernel): equal unless
  // the top two are within the noise of the int8 activations.
  testing::expect_greedy_is_prefill_argmax(*q, std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), 8, 2e-2f);
}

// See docs/numerics.md.
INSTANTIATE_TEST_SUITE_P(Fixtures, Quantized,
                         ::testing::Combine(::testing::ValuesIn(testing::parity_fixtures()),
                                            ::testing::Values(Bound{8, 1e-3}, Bound{4, 5e-2})),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param).bits) + "bit";
                         });

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json c = nlohmann::json::parse(read_text_file(dir + "/config.json"));
  f(c);
  std::ofstream(dir + "/config.json") << c.dump();
}

TEST(QuantizedErrors, MalformedQuantizedModelsAreClearErrors) {
  const std::string dir = testing::data_path("parity/qwen3");
  testing::TempDir tmp;
  const std::string q = convert(dir, 4, 32, tmp.path() + "/q");
  auto expect_error = [&](const std::string& needle) {
    try {
      load_model(q);
      ADD_FAILURE() << "loaded; expected an error containing '" << needle << "'";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  edit_config(q, [](nlohmann::json& c) { c["quantization"]["bits"] = 7; });
  expect_error("bits must be 2, 3, 4, 5, 6 or 8");
  edit_config(q, [](nlohmann::json& c) {
    c["quantization"]["bits"] = 4;
    c["quantization"]["group_size"] = 48;
  });
  expect_error("group_size must be 32, 64 or 128");
  // The config says 8 bits, the weights are 4-bit: the packed shape gives it away.
  edit_config(q, [](nlohmann::json& c) {
    c["quantization"]["group_size"] = 32;
    c["quantization"]["bits"] = 8;
  });
  expect_error("expected");
  edit_config(q, [](nlohmann::json& c) {
    c["quantization"]["bits"] = 4;
    c["quantization"]["group_size"] = 64;
  });
  expect_error("scales");
  edit_config(q, [](nlohmann::json& c) {
    c.erase("quantization");
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  });
  expect_error("gptq");
  edit_config(q, [](nlohmann::json& c) { c.erase("quantization_config"); });
  expect_error("does not quantize");
  // A module marked false while its weights are quantized.
  edit_config(q, [](nlohmann::json& c) {
    c["quantization"] = {{"bits", 4}, {"group_size", 32}, {"model.layers.0.mlp.up_proj", false}};
  });
  expect_error("model.layers.0.mlp.up_proj");
  // Converting into a non-empty directory is refused and leaves it alone.
  int status = 0;
  std::string err;
  testing::run_hearth("convert " + dir + " -q --mlx-path " + q, &status, &err);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("not an empty directory"), std::string::npos) << err;
  testing::run_hearth("convert " + dir + " -q --q-bits 7 --mlx-path " + tmp.path() + "/x", &status, &err);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("bits"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(tmp.path() + "/x"));
  // GGUF output carries the tokenizer: a checkpoint without tokenizer.json is refused by name.
  testing::run_hearth("convert " + dir + " --to gguf --type q8_0 --out " + tmp.path() + "/x.gguf", &status, &err);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("tokenizer.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(tmp.path() + "/x.gguf"));
}

}  // namespace
}  // namespace hearth
