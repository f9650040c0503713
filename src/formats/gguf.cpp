#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/strings.h"

namespace hearth {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF values are read in host byte order");

constexpr uint64_t kMaxKeyBytes = 65535;                 // the spec's limit on a metadata key
constexpr int kMaxArrayDepth = 8;                        // nested arrays; ggml accepts none, gguf-py any
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// Built by appending: GCC 12 reports a false -Wrestrict on "'" + std::string.
std::string quoted(std::string_view s) {
  std::string out(1, '\'');
  out += printable(s, 80);
  out += '\'';
  return out;
}

// Bounds-checked reads over the file image. `context_` names what is being parsed ("metadata
// key 'x'", "tensor 3") so a truncation error says where it happened.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail(const std::string& problem) const {
    throw FileError(path_, context_.empty() ? problem : context_ + ": " + problem);
  }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > remaining()) {
      fail("truncated file: " + std::string(what) + " at offset " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, only " + std::to_string(remaining()) + " remain");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > remaining()) {
      fail(std::string(what) + " of " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           " runs past the end of the file (" + std::to_string(remaining()) + " bytes remain; truncated?)");
    }
    const uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
  std::string context_;
};

GgufValue read_value(Reader& r, GgufValueType type, int depth);

GgufArray read_array(Reader& r, int depth) {
  if (depth >= kMaxArrayDepth) r.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  const uint32_t type_id = r.read<uint32_t>("array element type");
  if (type_id >= kGgufValueTypeCount)
    r.fail("array element type id " + std::to_string(type_id) + " is not a GGUF type");
  GgufArray a;
  a.type = static_cast<GgufValueType>(type_id);
  const uint64_t n = r.read<uint64_t>("array length");
  // The smallest encoding of one element: a fixed-size value, a string's length, or a nested
  // array's type and length. Checking the count against it first keeps allocations <= file.
  const uint64_t scalar = gguf_scalar_size(a.type);
  const uint64_t min_bytes = scalar != 0 ? scalar : a.type == GgufValueType::kString ? 8 : 12;
  if (n > r.remaining() / min_bytes) {
    r.fail("array of " + std::to_string(n) + " " + std::string(gguf_value_type_name(a.type)) +
           " elements cannot fit in the " + std::to_string(r.remaining()) + " bytes left (corrupt or truncated file?)");
  }
  if (scalar != 0) {
    const uint8_t* p = r.take(n * scalar, "array data");
    a.packed.assign(p, p + n * scalar);
    if (a.type == GgufValueType::kBool) {
      for (uint64_t i = 0; i < n; ++i)
        if (p[i] > 1)
          r.fail("bool array element " + std::to_string(i) + " is " + std::to_string(p[i]) + ", not 0 or 1");
    }
  } else if (a.type == GgufValueType::kString) {
    // No reserve(n): n is bounded only by the bytes left, which in a model file can be GBs.
    // Growing as elements parse keeps memory a small multiple of the bytes actually read.
    for (uint64_t i = 0; i < n; ++i) a.strings.push_back(r.string("array string"));
  } else {
    for (uint64_t i = 0; i < n; ++i) a.arrays.push_back(read_array(r, depth + 1));
  }
  return a;
}

GgufValue read_value(Reader& r, GgufValueType type, int depth) {
  switch (type) {
    case GgufValueType::kU8: return r.read<uint8_t>("u8 value");
    case GgufValueType::kI8: return r.read<int8_t>("i8 value");
    case GgufValueType::kU16: return r.read<uint16_t>("u16 value");
    case GgufValueType::kI16: return r.read<int16_t>("i16 value");
    case GgufValueType::kU32: return r.read<uint32_t>("u32 value");
    case GgufValueType::kI32: return r.read<int32_t>("i32 value");
    case GgufValueType::kF32: return r.read<float>("f32 value");
    case GgufValueType::kU64: return r.read<uint64_t>("u64 value");
    case GgufValueType::kI64: return r.read<int64_t>("i64 value");
    case GgufValueType::kF64: return r.read<double>("f64 value");
    case GgufValueType::kString: return r.string("string value");
    case GgufValueType::kArray: return read_array(r, depth);
    case GgufValueType::kBool: {
      const uint8_t b = r.read<uint8_t>("bool value");
      if (b > 1) r.fail("bool value is " + std::to_string(b) + ", not 0 or 1");
      return b == 1;
    }
  }
  HEARTH_CHECK_MSG(false, "bad GgufValueType");
}

void read_header_start(Reader& r, GgufHeader& h) {
  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    if (std::memcmp(magic, "FUGG", 4) == 0) r.fail("big-endian GGUF files are not supported");
    r.fail("bad magic '" + printable(std::string_view(reinterpret_cast<const char*>(magic), 4)) + "': not a GGUF file");
  }
  h.version = r.read<uint32_t>("version");
  if (h.version != 0 && (h.version & 0xFFFF) == 0)
    r.fail("version " + std::to_string(h.version) + " looks byte-swapped: big-endian GGUF files are not supported");
  if (h.version != 2 && h.version != 3)
    r.fail("unsupported GGUF version " + std::to_string(h.version) + " (Hearth reads versions 2 and 3)");
}

void read_metadata(Reader& r, GgufMetadata& m, uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    r.set_context("metadata key " + std::to_string(i));
    std::string key = r.string("key");
    if (key.empty()) r.fail("empty key");
    if (key.size() > kMaxKeyBytes) r.fail("key of " + std::to_string(key.size()) + " bytes exceeds 65535");
    if (m.contains(key)) r.fail("duplicate key " + quoted(key));
    r.set_context("metadata key " + quoted(key));
    const uint32_t type_id = r.read<uint32_t>("value type");
    if (type_id >= kGgufValueTypeCount) r.fail("unknown value type id " + std::to_string(type_id));
    m.set(key, read_value(r, static_cast<GgufValueType>(type_id), 0));
  }
  r.set_context("");
}

uint64_t read_alignment(const Reader& r, const GgufMetadata& m) {
  const GgufValue* v = m.find("general.alignment");
  if (v == nullptr) return kGgufDefaultAlignment;
  const uint32_t* a = v->get_if<uint32_t>();
  if (a == nullptr) r.fail("general.alignment must be a u32, got " + v->describe());
  if (*a == 0 || (*a & (*a - 1)) != 0) r.fail("general.alignment " + std::to_string(*a) + " is not a power of two");
  return *a;
}

GgufTensorInfo read_tensor_info(Reader& r, uint64_t index, uint64_t alignment) {
  r.set_context("tensor " + std::to_string(index));
  GgufTensorInfo t;
  t.name = r.string("name");
  if (t.name.empty()) r.fail("empty name");
  if (t.name.size() > kGgufMaxTensorName)
    r.fail("name " + quoted(t.name) + " is " + std::to_string(t.name.size()) + " bytes, over GGUF's limit of 64");
  r.set_context("tensor " + quoted(t.name));
  const uint32_t n_dims = r.read<uint32_t>("n_dims");
  if (n_dims > kGgufMaxDims) r.fail("n_dims " + std::to_string(n_dims) + " exceeds the GGUF maximum of 4");
  t.n_dims = static_cast<int>(n_dims);
  uint64_t numel = 1;
  std::string ne_text;
  for (int j = 0; j < t.n_dims; ++j) {
    const uint64_t d = r.read<uint64_t>("dimension");
    ne_text += (j ? ", " : "") + std::to_string(d);
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      r.fail("ne[" + std::to_string(j) + "] = " + std::to_string(d) + " exceeds int64");
    if (d != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d)
      r.fail("element count of ne = [" + ne_text + ", ...] overflows int64");
    numel *= d;
    t.ne[j] = static_cast<int64_t>(d);
  }
  const uint32_t type_id = r.read<uint32_t>("type");
  const GgmlTypeInfo* info = ggml_type_info(type_id);
  if (info == nullptr) r.fail("unknown ggml type id " + std::to_string(type_id));
  t.type = info->type;
  if (t.ne[0] % info->block_size != 0) {
    r.fail("ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " + info->name + " block size " +
           std::to_string(info->block_size));
  }
  const uint64_t blocks = numel / static_cast<uint64_t>(info->block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) r.fail("byte size overflows");
  t.nbytes = blocks * info->block_bytes;
  t.offset = r.read<uint64_t>("offset");
  if (t.offset % alignment != 0) {
    r.fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment));
  }
  return t;
}

}  // namespace

Shape GgufTensorInfo::shape() const {
  std::array<int64_t, kGgufMaxDims> dims{};
  for (int j = 0; j < n_dims; ++j) dims[j] = ne[n_dims - 1 - j];
  return Shape::from(dims.begin(), dims.begin() + n_dims);
}

GgufHeader parse_gguf(const uint8_t* data, size_t size, const std::string& path) {
  Reader r(data, size, path);
  GgufHeader h;
  h.metadata = GgufMetadata(path);
  read_header_start(r, h);
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  if (n_kv > r.remaining() / kMinKvBytes)
    r.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(r.remaining()) +
           " bytes left (corrupt or truncated file?)");
  read_metadata(r, h.metadata, n_kv);
  if (n_tensors > r.remaining() / kMinTensorInfoBytes) {
    r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(r.remaining()) +
           " bytes left (corrupt or truncated file?)");
  }
  h.alignment = read_alignment(r, h.metadata);

  std::map<std::string, size_t, std::less<>> names;
  h.tensors.reserve(std::min<uint64_t>(n_tensors, 1 << 16));  // not n: it may be corrupt
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(r, i, h.alignment);
    if (!names.emplace(t.name, i).second) {
      r.set_context("");
      r.fail("duplicate tensor name " + quoted(t.name));
    }
    h.tensors.push_back(std::move(t));
  }
  r.set_context("");

  // The data section starts at the next multiple of the alignment (pos <= size < 2^63, so no
  // overflow); with no tensors it may be absent.
  h.data_offset = (r.pos() + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_offset > size) {
    if (n_tensors > 0) {
      r.fail("truncated file: the data section would start at offset " + std::to_string(h.data_offset) +
             ", past the end of the file (" + std::to_string(size) + " bytes)");
    }
    h.data_offset = size;
  }
  const uint64_t data_size = size - h.data_offset;
  uint64_t prev_end = 0;
  const GgufTensorInfo* prev = nullptr;
  for (const GgufTensorInfo& t : h.tensors) {
    if (t.offset < prev_end) {
      r.fail("tensor " + quoted(t.name) + " at data offset " + std::to_string(t.offset) + " overlaps or precedes " +
             quoted(prev->name) + ", which ends at " + std::to_string(prev_end) +
             " (tensor data must be in file order without overlap)");
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      r.fail("tensor " + quoted(t.name) + " data at offset " + std::to_string(t.offset) + " + " +
             std::to_string(t.nbytes) + " bytes runs past the end of the " + std::to_string(data_size) +
             "-byte data section (truncated file?)");
    }
    prev_end = t.offset + t.nbytes;
    prev = &t;
  }
  return h;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto f = std::shared_ptr<GgufFile>(new GgufFile());
  f->file_ = MappedFile::open(path);
  f->header_ = parse_gguf(f->file_->data(), f->file_->size(), path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_.emplace(f->header_.tensors[i].name, i);
  return f;
}

const GgufTensorInfo* GgufFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Tensor GgufFile::raw(const GgufTensorInfo& t) const {
  return Tensor::view_of(bytes_of(t), Shape{static_cast<int64_t>(t.nbytes)}, DType::kU8, file_);
}

void GgufFile::require_supported(const GgufTensorInfo& t) const {
  if (!ggml_type_supported(t.type)) {
    throw FileError(path(), "tensor " + quoted(t.name) + " has ggml type " + std::string(ggml_type_name(t.type)) +
                                ", which Hearth does not load (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
  }
}

Tensor GgufFile::view(const GgufTensorInfo& t) const {
  require_supported(t);
  const uint8_t* p = bytes_of(t);
  DType dtype = DType::kU8;
  switch (t.type) {
    case GgmlType::kF32: dtype = DType::kF32; break;
    case GgmlType::kF16: dtype = DType::kF16; break;
    case GgmlType::kBF16: dtype = DType::kBF16; break;
    default: {  // block types: rows of blocks
      std::array<int64_t, kGgufMaxDims> dims{};
      for (int j = 0; j < t.n_dims; ++j) dims[j] = t.ne[t.n_dims - 1 - j];
      dims[t.n_dims - 1] = static_cast<int64_t>(row_bytes(t.type, t.ne[0]));
      return Tensor::view_of(p, Shape::from(dims.begin(), dims.begin() + t.n_dims), DType::kU8, file_);
    }
  }
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0) return Tensor::view_of(p, t.shape(), dtype, file_);
  Tensor out = Tensor::empty(t.shape(), dtype);
  std::memcpy(out.raw(), p, out.nbytes());
  return out;
}

Tensor GgufFile::dequantize(const GgufTensorInfo& t) const {
  require_supported(t);
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  if (t.numel() == 0) return out;
  const int64_t rows = t.numel() / t.ne[0];
  const uint64_t stride = row_bytes(t.type, t.ne[0]);
  for (int64_t i = 0; i < rows; ++i)
    dequantize_row(t.type, bytes_of(t) + i * stride, out.data<float>() + i * t.ne[0], t.ne[0]);
  return out;
}

}  // namespace hearth
