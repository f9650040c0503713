#include "formats/gguf_writer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/strings.h"

namespace hearth {
namespace {

constexpr size_t kBufferBytes = 1 << 20;
constexpr int kMaxArrayDepth = 8;      // the reader's limit
constexpr size_t kMaxTensorName = 63;  // ggml keeps names in a 64-byte buffer with its NUL

template <typename T>
void append_le(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void append_string(std::string& out, const std::string& s) {
  append_le<uint64_t>(out, s.size());
  out += s;
}

void append_array(std::string& out, const GgufArray& a) {
  append_le<uint32_t>(out, static_cast<uint32_t>(a.type));
  append_le<uint64_t>(out, a.size());
  if (a.type == GgufValueType::kString) {
    for (const std::string& s : a.strings) append_string(out, s);
  } else if (a.type == GgufValueType::kArray) {
    for (const GgufArray& x : a.arrays) append_array(out, x);
  } else {
    out.append(reinterpret_cast<const char*>(a.packed.data()), a.packed.size());
  }
}

// Arrays the reader would refuse (or that are internally inconsistent) are refused here.
void check_array(const std::string& key, const GgufArray& a, int depth) {
  if (depth >= kMaxArrayDepth)
    throw InputError("gguf metadata '" + printable(key) + "': arrays nested deeper than " +
                     std::to_string(kMaxArrayDepth));
  const size_t scalar = gguf_scalar_size(a.type);
  const bool consistent = a.type == GgufValueType::kString ? a.packed.empty() && a.arrays.empty()
                          : a.type == GgufValueType::kArray
                              ? a.packed.empty() && a.strings.empty()
                              : scalar != 0 && a.packed.size() % scalar == 0 && a.strings.empty() && a.arrays.empty();
  if (!consistent) throw InputError("gguf metadata '" + printable(key) + "': malformed " + a.describe());
  if (a.type == GgufValueType::kBool) {
    for (uint8_t b : a.packed)
      if (b > 1) throw InputError("gguf metadata '" + printable(key) + "': bool array element is not 0 or 1");
  }
  for (const GgufArray& x : a.arrays) check_array(key, x, depth + 1);
}

bool destination_has_data(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (!S_ISREG(st.st_mode) || st.st_size > 0);
}

}  // namespace

void append_gguf_value(std::string& out, const GgufValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>)
          append_string(out, x);
        else if constexpr (std::is_same_v<T, GgufArray>)
          append_array(out, x);
        else if constexpr (std::is_same_v<T, bool>)
          append_le<uint8_t>(out, x ? 1 : 0);
        else
          append_le<T>(out, x);
      },
      v.variant());
}

GgufWriter::GgufWriter(std::string path, GgufWriterOptions options)
    : path_(std::move(path)), options_(options), metadata_(path_) {
  const uint32_t a = options_.alignment;
  if (a < 8 || (a & (a - 1)) != 0)
    throw InputError("gguf writer: alignment " + std::to_string(a) + " is not a power of two >= 8");
  if (!options_.overwrite && destination_has_data(path_))
    throw FileError(path_, "already exists and is not empty (set overwrite to replace it)");
  file_ = std::make_unique<AtomicFile>(path_);
}

GgufWriter::~GgufWriter() = default;  // AtomicFile removes its temporary file unless committed

void GgufWriter::set_metadata(const std::string& key, GgufValue value) {
  HEARTH_CHECK_MSG(!header_written_, "GgufWriter::set_metadata after tensor data");
  if (key.empty() || key.size() > 65535)
    throw InputError("gguf metadata key of " + std::to_string(key.size()) + " bytes (must be 1..65535)");
  if (key == "general.alignment") throw InputError("gguf writer: set general.alignment through GgufWriterOptions");
  if (const GgufArray* a = value.get_if<GgufArray>()) check_array(key, *a, 0);
  metadata_.set(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const Shape& shape) {
  HEARTH_CHECK_MSG(!header_written_, "GgufWriter::add_tensor after tensor data");
  const std::string what = "gguf tensor '" + printable(name) + "'";
  if (name.empty() || name.size() > kMaxTensorName)
    throw InputError(what + ": name must be 1.." + std::to_string(kMaxTensorName) + " bytes");
  for (const Declared& d : tensors_)
    if (d.name == name) throw InputError(what + ": declared twice");
  if (shape.rank() > 4) throw InputError(what + ": rank " + std::to_string(shape.rank()) + " exceeds GGUF's 4");
  uint64_t rows = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] < 0) throw InputError(what + ": negative dimension in " + shape.str());
    if (i + 1 < shape.rank()) {
      if (shape[i] != 0 && rows > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(shape[i]))
        throw InputError(what + ": shape " + shape.str() + " overflows");
      rows *= static_cast<uint64_t>(shape[i]);
    }
  }
  uint64_t row = 0;
  try {
    row = row_bytes(type, shape.rank() == 0 ? 1 : shape.dim(-1));
  } catch (const InputError& e) {
    throw InputError(what + " " + shape.str() + ": " + e.what());
  }
  if (row != 0 && rows > (std::numeric_limits<uint64_t>::max() - options_.alignment) / row)
    throw InputError(what + ": shape " + shape.str() + " overflows");
  const uint64_t nbytes = rows * row;
  tensors_.push_back({name, type, shape, data_size_, nbytes});
  const uint64_t padded = (nbytes + options_.alignment - 1) / options_.alignment * options_.alignment;
  if (padded > std::numeric_limits<uint64_t>::max() - data_size_) throw InputError(what + ": file size overflows");
  data_size_ += padded;
}

void GgufWriter::write_header() {
  std::string h = "GGUF";
  append_le<uint32_t>(h, 3);
  append_le<uint64_t>(h, tensors_.size());
  const bool custom_alignment = options_.alignment != 32;
  append_le<uint64_t>(h, metadata_.size() + (custom_alignment ? 1 : 0));
  if (custom_alignment) {
    append_string(h, "general.alignment");
    append_le<uint32_t>(h, static_cast<uint32_t>(GgufValueType::kU32));
    append_le<uint32_t>(h, options_.alignment);
  }
  for (const auto& [key, value] : metadata_.entries()) {
    append_string(h, key);
    append_le<uint32_t>(h, static_cast<uint32_t>(value.type()));
    append_gguf_value(h, value);
  }
  for (const Declared& d : tensors_) {
    append_string(h, d.name);
    append_le<uint32_t>(h, static_cast<uint32_t>(d.shape.rank()));
    for (int i = d.shape.rank() - 1; i >= 0; --i) append_le<uint64_t>(h, static_cast<uint64_t>(d.shape[i]));
    append_le<uint32_t>(h, static_cast<uint32_t>(d.type));
    append_le<uint64_t>(h, d.offset);
  }
  header_written_ = true;
  write_bytes(h.data(), h.size());
  pad_to_alignment();
  data_start_ = written_;
}

void GgufWriter::write_tensor_data(const std::string& name, const void* data, size_t nbytes) {
  HEARTH_CHECK_MSG(!finished_, "GgufWriter used after finish()");
  if (!header_written_) write_header();
  if (next_tensor_ >= tensors_.size())
    throw InputError("gguf tensor '" + printable(name) + "': data written but no more tensors were declared");
  const Declared& d = tensors_[next_tensor_];
  if (d.name != name) {
    throw InputError("gguf writer: expected the data of tensor '" + printable(d.name) +
                     "' next (declaration order), got '" + printable(name) + "'");
  }
  if (nbytes != d.nbytes) {
    throw InputError("gguf tensor '" + printable(name) + "': " + std::string(ggml_type_name(d.type)) + " " +
                     d.shape.str() + " needs " + std::to_string(d.nbytes) + " bytes, got " + std::to_string(nbytes));
  }
  HEARTH_CHECK(written_ == data_start_ + d.offset);
  write_bytes(data, nbytes);
  pad_to_alignment();
  ++next_tensor_;
}

void GgufWriter::write_tensor(const std::string& name, const Tensor& t) {
  HEARTH_CHECK_MSG(t.device() == kCpu, "GgufWriter::write_tensor needs a CPU tensor");
  if (next_tensor_ < tensors_.size() && tensors_[next_tensor_].name == name) {
    const Declared& d = tensors_[next_tensor_];
    DType want = DType::kU8;
    if (d.type == GgmlType::kF32) want = DType::kF32;
    if (d.type == GgmlType::kF16) want = DType::kF16;
    if (d.type == GgmlType::kBF16) want = DType::kBF16;
    if (t.dtype() != want || (want != DType::kU8 && t.shape() != d.shape)) {
      throw InputError("gguf tensor '" + printable(name) + "': declared " + std::string(ggml_type_name(d.type)) + " " +
                       d.shape.str() + ", got " + t.str());
    }
  }
  write_tensor_data(name, t.raw(), t.nbytes());
}

void GgufWriter::finish() {
  HEARTH_CHECK_MSG(!finished_, "GgufWriter::finish called twice");
  if (!header_written_) write_header();
  if (next_tensor_ < tensors_.size())
    throw InputError("gguf tensor '" + printable(tensors_[next_tensor_].name) + "' was declared but never written");
  flush();
  if (!options_.overwrite && destination_has_data(path_))
    throw FileError(path_, "appeared while writing and is not empty (set overwrite to replace it)");
  finished_ = true;
  file_->commit();
}

void GgufWriter::write_bytes(const void* data, size_t n) {
  written_ += n;
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.append(static_cast<const char*>(data), n);
    return;
  }
  flush();
  file_->append(data, n);  // large tensor data goes straight from the caller's buffer
}

void GgufWriter::flush() {
  file_->append(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void GgufWriter::pad_to_alignment() {
  static const char kZeros[256] = {};
  while (written_ % options_.alignment != 0) {
    const uint64_t n = std::min<uint64_t>(sizeof(kZeros), options_.alignment - written_ % options_.alignment);
    write_bytes(kZeros, n);
  }
}

}  // namespace hearth
