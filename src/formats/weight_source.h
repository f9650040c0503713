// The seam between checkpoint formats and the model code: tensors by their Hugging Face names.
// nn's WeightLoader reads only this interface, so every architecture loads from any source:
//   SafetensorsWeights  a model directory's safetensors files (WeightStore), names as stored;
//   GgufWeights         a llama.cpp GGUF file (formats/gguf_model.h), its names mapped to HF's
//                       and its load-time rewrites (Q/K row order) applied.
// A source serves plain tensors (float, or MLX affine's u32/scales/biases) and tensors in a
// ggml block format, which it reports through block_type() and serves as [rows, row_bytes] u8.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/ggml_blocks.h"
#include "core/tensor.h"
#include "formats/weight_store.h"

namespace hearth {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The tensor; FileError naming the source and the tensor when absent.
  virtual Tensor get(const std::string& name) const = 0;
  // The ggml block type of a block-quantized tensor (get() then returns its [rows, row_bytes]
  // u8 blocks); nullopt for everything else.
  virtual std::optional<GgmlType> block_type(const std::string& name) const { return std::nullopt; }
  // The name the file itself uses, for error messages.
  virtual std::string stored_name(const std::string& name) const { return name; }
  // Bytes of all tensors as stored.
  virtual uint64_t total_bytes() const = 0;
  // The directory or file, for error messages.
  virtual const std::string& source() const = 0;
};

// A model directory's safetensors files, names as stored.
class SafetensorsWeights final : public WeightSource {
 public:
  explicit SafetensorsWeights(WeightStore store) : store_(std::move(store)) {}
  bool has(const std::string& name) const override { return store_.has(name); }
  Tensor get(const std::string& name) const override { return store_.get(name); }
  uint64_t total_bytes() const override { return store_.total_bytes(); }
  const std::string& source() const override { return store_.source(); }

 private:
  WeightStore store_;
};

}  // namespace hearth
