// GGUF (ggml's single-file model format), versions 2 and 3, little-endian:
//   "GGUF" | version u32 | n_tensors u64 | n_kv u64 | n_kv x (key, type, value)
//   | n_tensors x (name, n_dims u32, ne[n_dims] u64, ggml type u32, offset u64)
//   | zero padding to general.alignment (default 32) | tensor data
// The reader maps the file and validates every count, length, size and offset with checked
// arithmetic before using it: malformed input is a FileError naming the problem, never a crash
// or an allocation larger than the file. docs/gguf.md lists the checks and the block layouts.
//
// Dimension order: GGUF's ne[0] is the fastest-varying (innermost) dimension, the reverse of
// torch. A torch [out, in] weight is stored with ne = [in, out]; shape() gives the torch order.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "core/tensor.h"
#include "formats/ggml_quants.h"
#include "formats/gguf_value.h"

namespace hearth {

constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr int kGgufMaxDims = 4;
constexpr size_t kGgufMaxTensorName = 64;  // bytes, from the spec (ggml itself stops at 63)

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  int n_dims = 0;
  std::array<int64_t, kGgufMaxDims> ne{1, 1, 1, 1};  // ne[0] innermost; 1 past n_dims
  uint64_t offset = 0;                               // from the start of the data section
  uint64_t nbytes = 0;

  int64_t numel() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Torch order, outermost first: [ne[n_dims-1], ..., ne[0]].
  Shape shape() const;
};

struct GgufHeader {
  uint32_t version = 0;
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // file order, which is data order
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // start of the data section, from the start of the file
};

// Parses and validates a whole file image. Tensors of any ggml type ggml defines are
// accepted here (their sizes are known); using one Hearth cannot decode is an error then.
GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& path);

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const GgufHeader& header() const { return header_; }
  const GgufMetadata& metadata() const { return header_.metadata; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }
  const GgufTensorInfo* find(std::string_view name) const;

  // The tensor's bytes, zero-copy: u8 [nbytes], any ggml type.
  Tensor raw(const GgufTensorInfo& t) const;
  // F32 / F16 / BF16: a typed tensor in torch order (zero-copy when aligned for the dtype).
  // Q8_0 / Q4_0 / Q4_K / Q6_K: zero-copy u8 [outer dims..., row_bytes(ne[0])], one row of
  // blocks per innermost row. Any other type: FileError naming the tensor and its type.
  Tensor view(const GgufTensorInfo& t) const;
  // A new f32 tensor in torch order; FileError for types dequantize_row does not decode.
  Tensor dequantize(const GgufTensorInfo& t) const;

 private:
  const uint8_t* bytes_of(const GgufTensorInfo& t) const { return file_->data() + header_.data_offset + t.offset; }
  void require_supported(const GgufTensorInfo& t) const;

  std::shared_ptr<MappedFile> file_;
  GgufHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace hearth
