#include "formats/gguf_value.h"

#include <limits>

#include "base/error.h"
#include "base/strings.h"

namespace hearth {
namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// An integer-typed value as sign + magnitude; false for any other type.
bool integer_value(const GgufValue& v, bool* negative, uint64_t* magnitude) {
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            *negative = x < 0;
            *magnitude =
                x < 0 ? uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(x)) : static_cast<uint64_t>(x);
          } else {
            *negative = false;
            *magnitude = x;
          }
          return true;
        } else {
          return false;
        }
      },
      v.variant());
}

bool is_integer_type(GgufValueType t) {
  return t != GgufValueType::kF32 && t != GgufValueType::kF64 && t != GgufValueType::kBool &&
         t != GgufValueType::kString && t != GgufValueType::kArray;
}

bool float_value(const GgufValue& v, double* out) {
  if (const float* f = v.get_if<float>()) return *out = *f, true;
  if (const double* d = v.get_if<double>()) return *out = *d, true;
  return false;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  constexpr std::string_view kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                         "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kGgufValueTypeCount ? kNames[i] : "?";
}

size_t gguf_scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

size_t GgufArray::size() const {
  if (type == GgufValueType::kString) return strings.size();
  if (type == GgufValueType::kArray) return arrays.size();
  return packed.size() / gguf_scalar_size(type);
}

GgufValue GgufArray::at(size_t i) const {
  HEARTH_CHECK(i < size());
  const uint8_t* p = packed.data() + i * gguf_scalar_size(type);
  switch (type) {
    case GgufValueType::kU8: return load<uint8_t>(p);
    case GgufValueType::kI8: return load<int8_t>(p);
    case GgufValueType::kU16: return load<uint16_t>(p);
    case GgufValueType::kI16: return load<int16_t>(p);
    case GgufValueType::kU32: return load<uint32_t>(p);
    case GgufValueType::kI32: return load<int32_t>(p);
    case GgufValueType::kF32: return load<float>(p);
    case GgufValueType::kBool: return *p != 0;
    case GgufValueType::kString: return strings[i];
    case GgufValueType::kArray: return arrays[i];
    case GgufValueType::kU64: return load<uint64_t>(p);
    case GgufValueType::kI64: return load<int64_t>(p);
    case GgufValueType::kF64: return load<double>(p);
  }
  HEARTH_CHECK_MSG(false, "bad GgufValueType");
}

std::string GgufArray::describe() const { return "array of " + std::string(gguf_value_type_name(type)); }

std::string GgufValue::describe() const {
  if (const GgufArray* a = get_if<GgufArray>()) return a->describe();
  return std::string(gguf_value_type_name(type()));
}

void GgufMetadata::set(const std::string& key, GgufValue value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(value));
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const GgufValue& GgufMetadata::at(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw FileError(source_, "missing metadata key '" + printable(key) + "'");
  return *v;
}

void GgufMetadata::wrong_type(std::string_view key, const char* expected, const GgufValue& got) const {
  throw FileError(source_, "metadata key '" + printable(key) + "': expected " + expected + ", got " + got.describe());
}

int64_t GgufMetadata::to_int(std::string_view key, const GgufValue& v) const {
  bool negative = false;
  uint64_t m = 0;
  if (!integer_value(v, &negative, &m)) wrong_type(key, "an integer", v);
  if (!negative && m > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw FileError(source_, "metadata key '" + printable(key) + "': value " + std::to_string(m) + " exceeds int64");
  return negative ? static_cast<int64_t>(~m + 1) : static_cast<int64_t>(m);
}

uint64_t GgufMetadata::to_uint(std::string_view key, const GgufValue& v) const {
  bool negative = false;
  uint64_t m = 0;
  if (!integer_value(v, &negative, &m)) wrong_type(key, "an unsigned integer", v);
  if (negative)
    throw FileError(source_, "metadata key '" + printable(key) + "': negative value where a count is expected");
  return m;
}

std::string GgufMetadata::get_string(std::string_view key) const {
  const GgufValue& v = at(key);
  if (const std::string* s = v.get_if<std::string>()) return *s;
  wrong_type(key, "a string", v);
}

int64_t GgufMetadata::get_int(std::string_view key) const { return to_int(key, at(key)); }
uint64_t GgufMetadata::get_uint(std::string_view key) const { return to_uint(key, at(key)); }

double GgufMetadata::get_float(std::string_view key) const {
  const GgufValue& v = at(key);
  double d = 0;
  if (!float_value(v, &d)) wrong_type(key, "a float (f32 or f64)", v);
  return d;
}

bool GgufMetadata::get_bool(std::string_view key) const {
  const GgufValue& v = at(key);
  if (const bool* b = v.get_if<bool>()) return *b;
  wrong_type(key, "a bool", v);
}

std::vector<std::string> GgufMetadata::get_string_array(std::string_view key) const {
  const GgufValue& v = at(key);
  const GgufArray* a = v.get_if<GgufArray>();
  if (a == nullptr || a->type != GgufValueType::kString) wrong_type(key, "an array of string", v);
  return a->strings;
}

std::vector<int64_t> GgufMetadata::get_int_array(std::string_view key) const {
  const GgufValue& v = at(key);
  const GgufArray* a = v.get_if<GgufArray>();
  if (a == nullptr || !is_integer_type(a->type)) wrong_type(key, "an array of integers", v);
  std::vector<int64_t> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) out.push_back(to_int(key, a->at(i)));
  return out;
}

std::vector<float> GgufMetadata::get_float_array(std::string_view key) const {
  const GgufValue& v = at(key);
  const GgufArray* a = v.get_if<GgufArray>();
  if (a == nullptr || (a->type != GgufValueType::kF32 && a->type != GgufValueType::kF64))
    wrong_type(key, "an array of f32 or f64", v);
  std::vector<float> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    double d = 0;
    float_value(a->at(i), &d);
    out.push_back(static_cast<float>(d));
  }
  return out;
}

std::string GgufMetadata::get_string_or(std::string_view key, const std::string& fallback) const {
  return contains(key) ? get_string(key) : fallback;
}
int64_t GgufMetadata::get_int_or(std::string_view key, int64_t fallback) const {
  return contains(key) ? get_int(key) : fallback;
}
uint64_t GgufMetadata::get_uint_or(std::string_view key, uint64_t fallback) const {
  return contains(key) ? get_uint(key) : fallback;
}
double GgufMetadata::get_float_or(std::string_view key, double fallback) const {
  return contains(key) ? get_float(key) : fallback;
}
bool GgufMetadata::get_bool_or(std::string_view key, bool fallback) const {
  return contains(key) ? get_bool(key) : fallback;
}

}  // namespace hearth
