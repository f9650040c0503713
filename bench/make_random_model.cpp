// Writes a random-weight model directory of a Llama-family shape for benchmarks:
// config.json + model.safetensors (bf16, f16 or f32). Values ~N(0, 0.02), norms ~1.
// The shape is a preset's or, with --config FILE, any llama / mistral / qwen2 / qwen3
// config.json's (copied as is; with the biases qwen2, attention_bias and mlp_bias ask for).
// --tokenizer DIR copies a real tokenizer (tokenizer.json + tokenizer_config.json, e.g.
// tests/data/external/tokenizers/qwen3) in, so that the model has text and a GGUF form that
// llama.cpp loads; its ids must fit the vocabulary. The MLX-quantized and GGUF forms come from
// `hearth convert` of the directory (bench/peer/README.md).
// Usage: make_random_model OUT_DIR [--preset NAME | --config FILE] [--dtype bf16|f16|f32] [--tokenizer DIR]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "formats/safetensors.h"

namespace {

struct Shape {
  std::string name, model_type;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  bool tied;
  double rope_theta, rms_norm_eps;
  int64_t context;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
};

// The shapes of the released checkpoints' config.json files (hidden sizes, heads, rope base).
const Shape kPresets[] = {
    {"tiny", "qwen3", 1000, 64, 160, 2, 4, 2, 16, false, 1e6, 1e-6, 40960},
    // The smallest shape whose every matrix row holds whole K-quant super-blocks (256 values).
    {"tiny-256", "qwen3", 1000, 256, 512, 2, 4, 2, 64, false, 1e6, 1e-6, 40960},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 3072, 28, 16, 8, 128, true, 1e6, 1e-6, 40960},
    {"qwen3-1.7b", "qwen3", 151936, 2048, 6144, 28, 16, 8, 128, true, 1e6, 1e-6, 40960},
    {"qwen3-4b", "qwen3", 151936, 2560, 9728, 36, 32, 8, 128, true, 1e6, 1e-6, 40960},
    {"llama-3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, false, 500000, 1e-5, 8192},
};

// The shape of a config.json; the file itself is copied into the model as is.
Shape shape_of_config(const std::string& path) try {
  const auto j = nlohmann::json::parse(hearth::read_text_file(path));
  Shape s{};
  s.name = path;
  s.model_type = j.at("model_type").get<std::string>();
  if (s.model_type != "llama" && s.model_type != "mistral" && s.model_type != "qwen2" && s.model_type != "qwen3")
    throw hearth::InputError(path + ": model_type '" + s.model_type + "' (llama, mistral, qwen2 and qwen3 are made)");
  s.vocab = j.at("vocab_size").get<int64_t>();
  s.hidden = j.at("hidden_size").get<int64_t>();
  s.intermediate = j.at("intermediate_size").get<int64_t>();
  s.layers = j.at("num_hidden_layers").get<int64_t>();
  s.heads = j.at("num_attention_heads").get<int64_t>();
  s.kv_heads = j.value("num_key_value_heads", s.heads);
  s.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>() : s.hidden / s.heads;
  s.tied = j.value("tie_word_embeddings", false);
  s.o_bias = j.value("attention_bias", false);  // Llama's: q, k, v and o
  s.qkv_bias = s.model_type == "qwen2" || s.o_bias;
  s.mlp_bias = j.value("mlp_bias", false);
  for (int64_t v : {s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim}) {
    if (v <= 0) throw hearth::InputError(path + ": every size must be positive");
  }
  return s;
} catch (const nlohmann::json::exception& e) {
  throw hearth::InputError(path + ": " + e.what());
}

std::string config_json(const Shape& s) {
  nlohmann::ordered_json j = {{"architectures", {s.model_type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
                              {"model_type", s.model_type},
                              {"vocab_size", s.vocab},
                              {"hidden_size", s.hidden},
                              {"intermediate_size", s.intermediate},
                              {"num_hidden_layers", s.layers},
                              {"num_attention_heads", s.heads},
                              {"num_key_value_heads", s.kv_heads},
                              {"head_dim", s.head_dim},
                              {"rms_norm_eps", s.rms_norm_eps},
                              {"rope_theta", s.rope_theta},
                              {"max_position_embeddings", s.context},
                              {"tie_word_embeddings", s.tied},
                              {"eos_token_id", 2}};
  return j.dump(2) + "\n";
}

// Filled in chunks of 1M values on every core, chunk c from its own generator seeded by (seed,
// c): the same values whatever the thread count (an 8B model's 8G values take minutes on one).
hearth::Tensor random_tensor(uint32_t seed, hearth::Shape shape, hearth::DType dtype, float mean, float stddev) {
  hearth::Tensor t = hearth::Tensor::empty(shape, dtype);
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  auto fill = [&] {
    for (int64_t c = next++; c < chunks; c = next++) {
      std::seed_seq seq{seed, static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32)};
      std::mt19937 rng(seq);
      std::normal_distribution<float> dist(mean, stddev);
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        const float v = dist(rng);
        if (dtype == hearth::DType::kF32) t.data<float>()[i] = v;
        if (dtype == hearth::DType::kBF16) t.data<uint16_t>()[i] = hearth::f32_to_bf16(v);
        if (dtype == hearth::DType::kF16) t.data<uint16_t>()[i] = hearth::f32_to_f16(v);
      }
    }
  };
  std::vector<std::thread> threads;
  const int64_t extra = std::min<int64_t>(chunks, std::thread::hardware_concurrency()) - 1;
  for (int64_t i = 0; i < extra; ++i) threads.emplace_back(fill);
  fill();
  for (std::thread& th : threads) th.join();
  return t;
}

}  // namespace

int run(int argc, char** argv) {
  std::string out, preset, config, dtype_name = "bf16", tokenizer;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      preset = argv[++i];
    } else if (a == "--config" && i + 1 < argc) {
      config = argv[++i];
    } else if (a == "--dtype" && i + 1 < argc) {
      dtype_name = argv[++i];
    } else if (a == "--tokenizer" && i + 1 < argc) {
      tokenizer = argv[++i];
    } else if (a[0] != '-' && out.empty()) {
      out = a;
    } else {
      std::fprintf(stderr,
                   "usage: make_random_model OUT_DIR [--preset NAME | --config FILE] [--dtype bf16|f16|f32] "
                   "[--tokenizer DIR]\n");
      return 2;
    }
  }
  if (!preset.empty() && !config.empty()) throw hearth::InputError("--preset and --config exclude each other");
  Shape shape;
  if (!config.empty()) {
    shape = shape_of_config(config);
  } else {
    if (preset.empty()) preset = "tiny";
    const Shape* p = nullptr;
    for (const Shape& candidate : kPresets)
      if (preset == candidate.name) p = &candidate;
    if (p == nullptr) {
      std::string names;
      for (const Shape& candidate : kPresets) names += (names.empty() ? "" : ", ") + candidate.name;
      throw hearth::InputError("unknown --preset '" + preset + "' (" + names + ")");
    }
    shape = *p;
  }
  const Shape* s = &shape;
  const auto dtype = hearth::dtype_from_name(dtype_name);
  if (!dtype || !hearth::is_float(*dtype)) throw hearth::InputError("--dtype '" + dtype_name + "' (bf16, f16, f32)");
  if (out.empty()) throw hearth::InputError("need OUT_DIR");
  std::filesystem::create_directories(out);
  if (!tokenizer.empty()) {
    // The tokenizer's ids must be rows of the embedding: the largest id below the vocabulary.
    const std::string text = hearth::read_text_file(tokenizer + "/tokenizer.json");
    int64_t max_id = -1;
    for (size_t at = text.find("\"id\":"); at != std::string::npos; at = text.find("\"id\":", at + 1))
      max_id = std::max<int64_t>(max_id, std::atoll(text.c_str() + at + 5));
    if (max_id >= s->vocab) {
      throw hearth::InputError(tokenizer + " has added token id " + std::to_string(max_id) + ", outside " + s->name +
                               "'s vocabulary of " + std::to_string(s->vocab));
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(tokenizer + "/" + f, out + "/" + f, std::filesystem::copy_options::overwrite_existing);
  }
  std::vector<std::pair<std::string, hearth::Tensor>> tensors;
  auto add = [&](const std::string& name, hearth::Shape shape, float mean = 0.0f, float sd = 0.02f) {
    const auto seed = static_cast<uint32_t>(1234 + tensors.size());
    tensors.emplace_back(name, random_tensor(seed, shape, *dtype, mean, sd));
  };
  add("model.embed_tokens.weight", {s->vocab, s->hidden});
  for (int64_t l = 0; l < s->layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add(p + ".input_layernorm.weight", {s->hidden}, 1.0f, 0.05f);
    add(p + ".post_attention_layernorm.weight", {s->hidden}, 1.0f, 0.05f);
    add(p + ".self_attn.q_proj.weight", {s->heads * s->head_dim, s->hidden});
    add(p + ".self_attn.k_proj.weight", {s->kv_heads * s->head_dim, s->hidden});
    add(p + ".self_attn.v_proj.weight", {s->kv_heads * s->head_dim, s->hidden});
    if (s->qkv_bias) {
      add(p + ".self_attn.q_proj.bias", {s->heads * s->head_dim});
      add(p + ".self_attn.k_proj.bias", {s->kv_heads * s->head_dim});
      add(p + ".self_attn.v_proj.bias", {s->kv_heads * s->head_dim});
    }
    add(p + ".self_attn.o_proj.weight", {s->hidden, s->heads * s->head_dim});
    if (s->o_bias) add(p + ".self_attn.o_proj.bias", {s->hidden});
    if (s->model_type == "qwen3") {
      add(p + ".self_attn.q_norm.weight", {s->head_dim}, 1.0f, 0.05f);
      add(p + ".self_attn.k_norm.weight", {s->head_dim}, 1.0f, 0.05f);
    }
    add(p + ".mlp.gate_proj.weight", {s->intermediate, s->hidden});
    add(p + ".mlp.up_proj.weight", {s->intermediate, s->hidden});
    add(p + ".mlp.down_proj.weight", {s->hidden, s->intermediate});
    if (s->mlp_bias) {
      add(p + ".mlp.gate_proj.bias", {s->intermediate});
      add(p + ".mlp.up_proj.bias", {s->intermediate});
      add(p + ".mlp.down_proj.bias", {s->hidden});
    }
  }
  add("model.norm.weight", {s->hidden}, 1.0f, 0.05f);
  if (!s->tied) add("lm_head.weight", {s->vocab, s->hidden});
  hearth::write_safetensors(out + "/model.safetensors", tensors);
  if (config.empty()) {
    std::ofstream(out + "/config.json") << config_json(*s);
  } else {
    std::filesystem::copy_file(config, out + "/config.json", std::filesystem::copy_options::overwrite_existing);
  }
  std::printf("wrote %s (%s, %s%s)\n", out.c_str(), s->name.c_str(), dtype_name.c_str(),
              tokenizer.empty() ? "" : (", tokenizer from " + tokenizer).c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_random_model: %s\n", e.what());
    return 2;
  }
}
