// safetensors: 8-byte little-endian header length, a JSON header, then the tensor bytes.
// The reader maps the file and hands out zero-copy views; every header field is validated
// (sizes with overflow checks, offsets inside the data, contiguous and non-overlapping).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "core/tensor.h"

namespace hearth {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Parses and validates the header of a whole file image. Throws FileError(path, problem).
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& path);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // Zero-copy view when the bytes are aligned for their dtype; an aligned copy otherwise.
  Tensor tensor(const SafetensorsEntry& entry) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// Writes a safetensors file one tensor at a time (memory stays near one tensor): the header
// is written from the declared specs first, then each tensor in order; finish() publishes
// the file atomically (a writer destroyed before finish() leaves nothing behind).
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, std::vector<Spec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  // The next declared tensor; InputError if its dtype or shape is not the declared one.
  void write(const Tensor& t);
  void finish();

 private:
  std::vector<Spec> specs_;
  size_t next_ = 0;
  AtomicFile file_;
};

// Writes tensors (CPU, any dtype) atomically: temporary file beside `path`, then rename.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hearth
