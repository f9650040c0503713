// bench/make_random_model: a preset's or any config.json's shape as a random-weight checkpoint
// that loads as a model (q/k/v biases where the config asks for them), and one-line errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "models/dense_decoder.h"
#include "models/model.h"
#include "test_util.h"

namespace hearth {
namespace {

int make_random_model(const std::string& args, std::string* err) {
  testing::TempDir tmp;
  const std::string cmd = std::string(HEARTH_MAKE_RANDOM_MODEL) + " " + args + " >/dev/null 2>" + tmp.file("err");
  const int rc = std::system(cmd.c_str());
  std::ifstream in(tmp.file("err"));
  *err = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(RandomModel, APresetLoadsWithItsShape) {
  testing::TempDir out;
  std::string err;
  ASSERT_EQ(make_random_model(out.path() + " --preset tiny-256 --dtype f16", &err), 0) << err;
  const auto config = read_json(out.file("config.json"));
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["hidden_size"], 256);
  EXPECT_EQ(config["rope_theta"], 1e6);
  auto model = load_model(out.path());
  EXPECT_EQ(model->info().n_layers, 2);
  EXPECT_EQ(model->info().vocab_size, 1000);
  EXPECT_EQ(model->info().head_dim, 64);
  const auto& dec = dynamic_cast<const DenseDecoder&>(*model);
  EXPECT_EQ(dec.attention(0).q.weight.dtype(), DType::kF16);
  EXPECT_EQ(dec.attention(0).q.weight.dim(0), 4 * 64);
}

TEST(RandomModel, AnyConfigIsCopiedAndItsShapeMade) {
  for (const std::string type : {"llama", "qwen2"}) {
    testing::TempDir out;
    const nlohmann::json config = {{"model_type", type},          {"vocab_size", 300},
                                   {"hidden_size", 96},           {"intermediate_size", 200},
                                   {"num_hidden_layers", 3},      {"num_attention_heads", 6},
                                   {"num_key_value_heads", 2},    {"rms_norm_eps", 1e-5},
                                   {"rope_theta", 500000.0},      {"attention_bias", type == "llama"},
                                   {"mlp_bias", type == "llama"}, {"tie_word_embeddings", type == "qwen2"}};
    std::ofstream(out.file("in.json")) << config.dump();
    std::string err;
    const std::string dir = out.file("model");
    ASSERT_EQ(make_random_model(dir + " --config " + out.file("in.json") + " --dtype f32", &err), 0) << err;
    EXPECT_EQ(read_json(dir + "/config.json"), config);
    auto model = load_model(dir);
    EXPECT_EQ(model->info().n_layers, 3);
    EXPECT_EQ(model->info().head_dim, 16);  // hidden / heads
    const auto& dec = dynamic_cast<const DenseDecoder&>(*model);
    EXPECT_EQ(dec.attention(2).k.weight.dim(0), 2 * 16);
    EXPECT_TRUE(dec.attention(0).q.bias.defined()) << type;
    EXPECT_EQ(dec.attention(0).o.bias.defined(), type == "llama");
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    EXPECT_EQ(file->find("lm_head.weight") != nullptr, type == "llama");
  }
}

TEST(RandomModel, BadArgumentsAreOneLineErrors) {
  testing::TempDir out;
  std::ofstream(out.file("gemma.json")) << R"({"model_type": "gemma"})";
  std::ofstream(out.file("broken.json")) << R"({"model_type": "llama", "vocab_size": 10})";
  const std::pair<std::string, std::string> cases[] = {
      {"--preset qwen9", "unknown --preset 'qwen9' (tiny, tiny-256, qwen3-0.6b, qwen3-1.7b, qwen3-4b, llama-3-8b)"},
      {"--dtype q4", "--dtype 'q4'"},
      {"--preset tiny --config " + out.file("gemma.json"), "exclude each other"},
      {"--config " + out.file("gemma.json"), "model_type 'gemma'"},
      {"--config " + out.file("broken.json"), "hidden_size"},
  };
  for (const auto& [args, needle] : cases) {
    std::string err;
    EXPECT_EQ(make_random_model(out.file("m") + " " + args, &err), 2) << args;
    EXPECT_NE(err.find(needle), std::string::npos) << args << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

}  // namespace
}  // namespace hearth
