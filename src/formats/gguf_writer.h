// Streaming GGUF writer (version 3). Metadata and tensor infos are declared first; tensor data
// then goes out one tensor at a time, in declaration order, so memory stays near one tensor.
// Everything is written through an AtomicFile (a temporary file beside the destination that
// finish() fsyncs and renames into place), so an interrupted write leaves no partial file.
//
//   GgufWriter w(path);
//   w.set_metadata("general.architecture", "llama");
//   w.add_tensor("token_embd.weight", GgmlType::kF16, {vocab, hidden});  // torch order
//   w.write_tensor_data("token_embd.weight", bytes, n);                  // ... each tensor
//   w.finish();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "core/tensor.h"
#include "formats/ggml_quants.h"
#include "formats/gguf_value.h"

namespace hearth {

struct GgufWriterOptions {
  uint32_t alignment = 32;  // a power of two; written as general.alignment when not 32
  bool overwrite = false;   // replace an existing non-empty destination
};

class GgufWriter {
 public:
  // Creates the temporary file. FileError when `path` exists, is non-empty and overwrite is
  // off, or the file cannot be created; InputError for a bad alignment.
  explicit GgufWriter(std::string path, GgufWriterOptions options = {});
  ~GgufWriter();  // without finish(): the temporary file is removed
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Before the first tensor data. general.alignment belongs to the options.
  void set_metadata(const std::string& key, GgufValue value);
  // Declares a tensor; `shape` is in torch order (outermost first), written as ne reversed.
  // InputError for a duplicate or over-long (>= 64 bytes, ggml's limit) name, rank > 4, or an
  // innermost dimension that is not a multiple of the type's block size.
  void add_tensor(const std::string& name, GgmlType type, const Shape& shape);

  // The next declared tensor's bytes (exactly its size). The first call writes the header.
  void write_tensor_data(const std::string& name, const void* data, size_t nbytes);
  // Same, from a CPU tensor: F32/F16/BF16 tensors of the declared type and shape, or a u8
  // tensor holding the encoded blocks.
  void write_tensor(const std::string& name, const Tensor& t);

  // Writes the header if no tensor did, checks every tensor was written, fsyncs and publishes.
  void finish();

  const std::string& path() const { return path_; }

 private:
  struct Declared {
    std::string name;
    GgmlType type;
    Shape shape;
    uint64_t offset;
    uint64_t nbytes;
  };

  void write_header();
  void write_bytes(const void* data, size_t n);
  void pad_to_alignment();
  void flush();

  std::string path_;
  GgufWriterOptions options_;
  std::unique_ptr<AtomicFile> file_;
  GgufMetadata metadata_;
  std::vector<Declared> tensors_;
  uint64_t data_size_ = 0;  // data section size so far (declared tensors, padded)
  size_t next_tensor_ = 0;
  bool header_written_ = false;
  bool finished_ = false;
  uint64_t written_ = 0;     // bytes written to the file so far
  uint64_t data_start_ = 0;  // file offset of the data section
  std::string buffer_;       // small writes are batched here
};

// Appends one value's encoding (type id not included) to `out`; exposed for tests that build
// GGUF images by hand.
void append_gguf_value(std::string& out, const GgufValue& v);

}  // namespace hearth
