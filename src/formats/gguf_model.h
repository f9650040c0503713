// A llama.cpp-converted GGUF file seen as the Hugging Face checkpoint it was made from, so that
// one load path serves both: the config.json its metadata stands for, its tensors under HF
// names (formats/weight_source.h) and its generation defaults. docs/gguf.md has the mapping.
//
// Architectures: general.architecture llama (Llama, Mistral), qwen2, qwen3. For llama the
// converter reorders the rows of q/k_proj (weights and biases) for ggml's interleaved RoPE;
// GgufWeights puts them back in HF's order at load time (copying those tensors), so the models
// run HF's rotate-half RoPE on every checkpoint. Llama 3 RoPE scaling comes as the tensor
// rope_freqs.weight (per-frequency divisors), served under that name.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "formats/generation_config.h"
#include "formats/gguf.h"
#include "formats/json_config.h"
#include "formats/weight_source.h"

namespace hearth {

struct GgufCheckpoint {
  std::shared_ptr<GgufFile> file;
  JsonConfig config;  // config.json as transformers writes it for this model
  std::unique_ptr<WeightSource> weights;
  GenerationConfig generation;
};

// Opens and maps PATH. FileError naming the file and the metadata key or tensor for anything
// missing or malformed, an architecture other than llama/qwen2/qwen3, or a tensor of a ggml type
// Hearth does not load.
GgufCheckpoint open_gguf_checkpoint(const std::string& path);

// The config.json that the metadata stands for (model_type, sizes, RoPE, tied embeddings).
JsonConfig gguf_hf_config(const GgufFile& file);
// eos/bos ids from the tokenizer metadata, sampling defaults from general.sampling.*.
GenerationConfig gguf_generation_config(const GgufMetadata& metadata);

// llama.cpp tensor names <-> HF names ("blk.3.attn_q.weight" <-> "model.layers.3.self_attn.
// q_proj.weight"). A name without a counterpart (rope_freqs.weight) maps to itself.
std::string gguf_to_hf_name(std::string_view gguf_name);
std::string hf_to_gguf_name(std::string_view hf_name);

// True when PATH is a regular file (a model argument that is not a directory is read as GGUF).
bool is_gguf_path(const std::string& path);

}  // namespace hearth
