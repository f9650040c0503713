#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/strings.h"

namespace hearth {
namespace {

using json = nlohmann::json;

// Headers larger than this are refused (the reference implementation uses the same cap).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F32", DType::kF32}, {"BF16", DType::kBF16}, {"F16", DType::kF16},
                                 {"I32", DType::kI32}, {"U32", DType::kU32},   {"U8", DType::kU8},
                                 {"I64", DType::kI64}};
// Valid safetensors dtypes that Hearth does not load.
constexpr const char* kKnownUnsupported[] = {"F64",     "I8",      "I16", "U16",     "U64",     "BOOL", "F8_E4M3",
                                             "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

// A header value for an error message: scalars as JSON, containers by type only (a nested
// value may be huge or deep enough that dumping it would overflow the stack).
std::string describe(const json& v) {
  if (v.is_structured()) return v.type_name();
  return printable(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

const char* safetensors_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

DType parse_dtype(const std::string& s, const std::string& tensor, const std::string& path) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.dtype;
  for (const char* u : kKnownUnsupported)
    if (s == u) throw FileError(path, "tensor '" + tensor + "' has dtype " + s + ", which Hearth does not load");
  throw FileError(path, "tensor '" + tensor + "' has unknown dtype '" + printable(s) + "'");
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path, const std::string& tensor) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    throw FileError(path, "tensor '" + tensor + "': size overflows");
  return a * b;
}

uint64_t as_u64(const json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_integer()) throw FileError(path, what + ": expected an integer, got " + describe(v));
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  const int64_t s = v.get<int64_t>();
  if (s < 0) throw FileError(path, what + ": negative value " + std::to_string(s));
  return static_cast<uint64_t>(s);
}

SafetensorsEntry parse_entry(const std::string& key, const json& v, const std::string& path) {
  const std::string name = printable(key);  // for messages; the entry keeps the key as is
  if (!v.is_object()) throw FileError(path, "tensor '" + name + "': expected an object in the header");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) throw FileError(path, "tensor '" + name + "': missing '" + key + "'");
  }
  SafetensorsEntry e;
  e.name = key;
  if (!v["dtype"].is_string()) throw FileError(path, "tensor '" + name + "': dtype is not a string");
  e.dtype = parse_dtype(v["dtype"].get<std::string>(), name, path);
  const json& shape = v["shape"];
  if (!shape.is_array()) throw FileError(path, "tensor '" + name + "': shape is not an array");
  if (shape.size() > static_cast<size_t>(Shape::kMaxRank)) {
    throw FileError(path, "tensor '" + name + "': rank " + std::to_string(shape.size()) + " exceeds " +
                              std::to_string(Shape::kMaxRank));
  }
  std::vector<int64_t> dims;
  uint64_t numel = 1;
  for (const json& d : shape) {
    const uint64_t n = as_u64(d, path, "tensor '" + name + "' shape");
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw FileError(path, "tensor '" + name + "': dimension too large");
    numel = checked_mul(numel, n, path, name);
    dims.push_back(static_cast<int64_t>(n));
  }
  e.shape = Shape::from(dims.begin(), dims.end());
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    throw FileError(path, "tensor '" + name + "': data_offsets must be [begin, end]");
  e.begin = as_u64(off[0], path, "tensor '" + name + "' data_offsets");
  e.end = as_u64(off[1], path, "tensor '" + name + "' data_offsets");
  if (e.end < e.begin) throw FileError(path, "tensor '" + name + "': data_offsets end before begin");
  const uint64_t bytes = checked_mul(numel, dtype_size(e.dtype), path, name);
  if (e.end - e.begin != bytes) {
    throw FileError(path, "tensor '" + name + "': shape " + e.shape.str() + " of " + std::string(dtype_name(e.dtype)) +
                              " needs " + std::to_string(bytes) + " bytes, data_offsets span " +
                              std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 8)
    throw FileError(path, "truncated: " + std::to_string(size) + " bytes, too short for a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeaderBytes) throw FileError(path, "header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > size - 8) {
    throw FileError(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(size) + " bytes)");
  }
  json header;
  try {
    header = json::parse(data + 8, data + 8 + n);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw FileError(path, std::string("header is not valid JSON: ") + printable(e.what(), 400));
  }
  if (!header.is_object()) throw FileError(path, "header is not a JSON object");
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw FileError(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw FileError(path, "__metadata__ value for '" + printable(m.key()) + "' is not a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, path));
  }
  // Tensors must tile the data section exactly: sorted, contiguous, no overlap, no gap.
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const uint64_t data_size = size - h.data_offset;
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin < expected) throw FileError(path, "tensor '" + printable(e.name) + "' overlaps the tensor before it");
    if (e.begin > expected)
      throw FileError(
          path, "gap of " + std::to_string(e.begin - expected) + " bytes before tensor '" + printable(e.name) + "'");
    if (e.end > data_size) {
      throw FileError(path, "tensor '" + printable(e.name) + "' data [" + std::to_string(e.begin) + ", " +
                                std::to_string(e.end) + ") lies outside the " + std::to_string(data_size) +
                                "-byte data section (truncated file?)");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    throw FileError(
        path, std::to_string(data_size - expected) + " bytes after the last tensor are not described by the header");
  }
  return h;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->file_ = MappedFile::open(path);
  f->header_ = parse_safetensors(f->file_->data(), f->file_->size(), path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e) const {
  const uint8_t* p = file_->data() + header_.data_offset + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) == 0) return Tensor::view_of(p, e.shape, e.dtype, file_);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  std::memcpy(t.raw(), p, t.nbytes());
  return t;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<Spec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : specs_(std::move(specs)), file_(path) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Spec& s : specs_) {
    const uint64_t bytes =
        static_cast<uint64_t>(Shape::from(s.shape.begin(), s.shape.end()).numel()) * dtype_size(s.dtype);
    header[s.name] = {
        {"dtype", safetensors_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  char len[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  file_.append(len, 8);
  file_.append(text.data(), text.size());
}

void SafetensorsWriter::write(const Tensor& t) {
  if (next_ >= specs_.size()) throw InputError("safetensors writer: more tensors than declared");
  const Spec& s = specs_[next_];
  if (t.dtype() != s.dtype || t.shape() != Shape::from(s.shape.begin(), s.shape.end())) {
    throw InputError("safetensors writer: '" + s.name + "' declared " +
                     Shape::from(s.shape.begin(), s.shape.end()).str() + " " + std::string(dtype_name(s.dtype)) +
                     ", got " + t.str());
  }
  file_.append(t.raw(), t.nbytes());
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != specs_.size()) {
    throw InputError("safetensors writer: " + std::to_string(specs_.size() - next_) + " declared tensors not written");
  }
  file_.commit();
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, t] : tensors) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
    specs.push_back({name, t.dtype(), shape});
  }
  SafetensorsWriter w(path, std::move(specs), metadata);
  for (const auto& [name, t] : tensors) w.write(t);
  w.finish();
}

}  // namespace hearth
