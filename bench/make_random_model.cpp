// Writes a random-weight model directory of a Llama-family shape for benchmarks:
// config.json + model.safetensors (bf16, f16 or f32). Values ~N(0, 0.02), norms ~1.
// --tokenizer DIR copies a real tokenizer (tokenizer.json + tokenizer_config.json, e.g.
// tests/data/external/tokenizers/qwen3) in, so that the model has text and a GGUF form that
// llama.cpp loads (hearth convert --to gguf); its ids must fit the preset's vocabulary.
// Usage: make_random_model OUT_DIR --preset qwen3-0.6b|qwen3-1.7b|llama-3-8b|tiny|tiny-256 [--dtype bf16]
//        [--tokenizer DIR]
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

#include "base/error.h"
#include "base/mapped_file.h"
#include "formats/safetensors.h"

namespace {

struct Shape {
  const char* name;
  const char* model_type;
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  bool tied;
};

constexpr Shape kPresets[] = {
    {"tiny", "qwen3", 1000, 64, 160, 2, 4, 2, 16, false},
    // The smallest shape whose every matrix row holds whole K-quant super-blocks (256 values).
    {"tiny-256", "qwen3", 1000, 256, 512, 2, 4, 2, 64, false},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 3072, 28, 16, 8, 128, true},
    {"qwen3-1.7b", "qwen3", 151936, 2048, 6144, 28, 16, 8, 128, true},
    {"llama-3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, false},
};

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

int main(int argc, char** argv) {
  std::string out, preset = "tiny", dtype_name = "bf16", tokenizer;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      preset = argv[++i];
    } else if (a == "--dtype" && i + 1 < argc) {
      dtype_name = argv[++i];
    } else if (a == "--tokenizer" && i + 1 < argc) {
      tokenizer = argv[++i];
    } else if (a[0] != '-' && out.empty()) {
      out = a;
    } else {
      std::fprintf(stderr,
                   "usage: make_random_model OUT_DIR [--preset NAME] [--dtype bf16|f16|f32] [--tokenizer DIR]\n");
      return 2;
    }
  }
  const Shape* s = nullptr;
  for (const Shape& p : kPresets)
    if (preset == p.name) s = &p;
  const auto dtype = hearth::dtype_from_name(dtype_name);
  if (out.empty() || s == nullptr || !dtype) {
    std::fprintf(stderr, "make_random_model: need OUT_DIR, a known --preset and --dtype\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  if (!tokenizer.empty()) {
    // The tokenizer's ids must be rows of the embedding: the largest id below the vocabulary.
    const std::string text = hearth::read_text_file(tokenizer + "/tokenizer.json");
    int64_t max_id = -1;
    for (size_t at = text.find("\"id\":"); at != std::string::npos; at = text.find("\"id\":", at + 1))
      max_id = std::max<int64_t>(max_id, std::atoll(text.c_str() + at + 5));
    if (max_id >= s->vocab) {
      std::fprintf(stderr, "make_random_model: %s has added token id %lld, outside %s's vocabulary of %lld\n",
                   tokenizer.c_str(), static_cast<long long>(max_id), s->name, static_cast<long long>(s->vocab));
      return 2;
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
    add(p + ".self_attn.o_proj.weight", {s->hidden, s->heads * s->head_dim});
    if (std::string(s->model_type) == "qwen3") {
      add(p + ".self_attn.q_norm.weight", {s->head_dim}, 1.0f, 0.05f);
      add(p + ".self_attn.k_norm.weight", {s->head_dim}, 1.0f, 0.05f);
    }
    add(p + ".mlp.gate_proj.weight", {s->intermediate, s->hidden});
    add(p + ".mlp.up_proj.weight", {s->intermediate, s->hidden});
    add(p + ".mlp.down_proj.weight", {s->hidden, s->intermediate});
  }
  add("model.norm.weight", {s->hidden}, 1.0f, 0.05f);
  if (!s->tied) add("lm_head.weight", {s->vocab, s->hidden});
  hearth::write_safetensors(out + "/model.safetensors", tensors);
  std::ofstream cfg(out + "/config.json");
  cfg << "{\n  \"model_type\": \"" << s->model_type << "\",\n  \"vocab_size\": " << s->vocab
      << ",\n  \"hidden_size\": " << s->hidden << ",\n  \"intermediate_size\": " << s->intermediate
      << ",\n  \"num_hidden_layers\": " << s->layers << ",\n  \"num_attention_heads\": " << s->heads
      << ",\n  \"num_key_value_heads\": " << s->kv_heads << ",\n  \"head_dim\": " << s->head_dim
      << ",\n  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 1000000.0,\n  \"max_position_embeddings\": 40960"
      << ",\n  \"tie_word_embeddings\": " << (s->tied ? "true" : "false") << ",\n  \"eos_token_id\": 2\n}\n";
  std::printf("wrote %s (%s, %s%s)\n", out.c_str(), s->name, dtype_name.c_str(),
              tokenizer.empty() ? "" : (", tokenizer from " + tokenizer).c_str());
  return 0;
}
