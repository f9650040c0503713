// GGUF metadata values: the 13 value types, arrays (nestable) and an ordered key -> value map
// with typed getters whose errors name the key and the expected type.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace hearth {

// gguf_metadata_value_type ids, as stored in the file.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
constexpr uint32_t kGgufValueTypeCount = 13;

std::string_view gguf_value_type_name(GgufValueType t);  // "u8", ..., "string", "array"
// Bytes of one value of a fixed-size type in a file (bool: 1); 0 for string and array.
size_t gguf_scalar_size(GgufValueType t);

template <typename T>
constexpr GgufValueType gguf_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return GgufValueType::kU8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return GgufValueType::kI8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return GgufValueType::kU16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return GgufValueType::kI16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return GgufValueType::kU32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return GgufValueType::kI32;
  else if constexpr (std::is_same_v<T, float>)
    return GgufValueType::kF32;
  else if constexpr (std::is_same_v<T, bool>)
    return GgufValueType::kBool;
  else if constexpr (std::is_same_v<T, std::string>)
    return GgufValueType::kString;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return GgufValueType::kU64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return GgufValueType::kI64;
  else if constexpr (std::is_same_v<T, double>)
    return GgufValueType::kF64;
  else
    static_assert(!sizeof(T*), "not a GGUF value type");
}

class GgufValue;
struct GgufArray;

template <typename T>
inline constexpr bool kIsGgufAlternative =
    std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint16_t> ||
    std::is_same_v<T, int16_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, int32_t> ||
    std::is_same_v<T, float> || std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
    std::is_same_v<T, GgufArray> || std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, double>;

// An array: elements of one type. Fixed-size elements stay packed as in the file
// (little-endian, bool as one 0/1 byte), so a large array costs what it costs on disk.
struct GgufArray {
  GgufValueType type = GgufValueType::kU8;
  std::vector<uint8_t> packed;       // fixed-size element types
  std::vector<std::string> strings;  // kString
  std::vector<GgufArray> arrays;     // kArray (each nested array has its own element type)

  size_t size() const;
  // Element i as a value (bounds-checked with HEARTH_CHECK).
  GgufValue at(size_t i) const;
  // "array of u32", "array of array"
  std::string describe() const;

  // T: a fixed-size value type, std::string or GgufArray.
  template <typename T>
  static GgufArray of(const std::vector<T>& xs);

  bool operator==(const GgufArray&) const = default;
};

// One metadata value. variant index == GgufValueType id.
class GgufValue {
 public:
  using Variant = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                               GgufArray, uint64_t, int64_t, double>;

  GgufValue() = default;
  // The type is the argument's exact type: GgufValue(uint32_t{4}) is a u32, GgufValue(4) an i32.
  template <typename T>
  requires kIsGgufAlternative<std::remove_cvref_t<T>> GgufValue(T&& v)
      : v_(std::in_place_type<std::remove_cvref_t<T>>, std::forward<T>(v)) {}
  GgufValue(const char* s) : v_(std::string(s)) {}
  template <typename T>
  GgufValue(const std::vector<T>& xs) : v_(GgufArray::of(xs)) {}

  GgufValueType type() const { return static_cast<GgufValueType>(v_.index()); }
  const Variant& variant() const { return v_; }
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&v_);
  }
  std::string describe() const;  // "u32", "string", "array of f32"
  bool operator==(const GgufValue&) const = default;

 private:
  Variant v_;
};

template <typename T>
GgufArray GgufArray::of(const std::vector<T>& xs) {
  GgufArray a;
  if constexpr (std::is_same_v<T, std::string>) {
    a.type = GgufValueType::kString;
    a.strings = xs;
  } else if constexpr (std::is_same_v<T, GgufArray>) {
    a.type = GgufValueType::kArray;
    a.arrays = xs;
  } else if constexpr (std::is_same_v<T, bool>) {
    a.type = GgufValueType::kBool;
    for (bool b : xs) a.packed.push_back(b ? 1 : 0);
  } else {
    static_assert(std::is_arithmetic_v<T>, "GgufArray::of: not a GGUF value type");
    a.type = gguf_type_of<T>();
    a.packed.resize(xs.size() * sizeof(T));
    if (!xs.empty()) std::memcpy(a.packed.data(), xs.data(), a.packed.size());
  }
  return a;
}

// Metadata in file order. Getters throw FileError(source, "metadata key 'k': ...") when the
// key is missing or holds another type; integer getters accept any integer type whose value
// fits, float getters f32 or f64 (GGUF writers differ in the widths they pick).
class GgufMetadata {
 public:
  explicit GgufMetadata(std::string source = "gguf") : source_(std::move(source)) {}

  // Adds a key, or replaces the value of an existing one in place.
  void set(const std::string& key, GgufValue value);
  bool contains(std::string_view key) const { return index_.find(key) != index_.end(); }
  const GgufValue* find(std::string_view key) const;
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const std::string& source() const { return source_; }

  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;

  // The default when the key is absent; a present key of the wrong type still throws.
  std::string get_string_or(std::string_view key, const std::string& fallback) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;

 private:
  const GgufValue& at(std::string_view key) const;
  [[noreturn]] void wrong_type(std::string_view key, const char* expected, const GgufValue& got) const;
  int64_t to_int(std::string_view key, const GgufValue& v) const;
  uint64_t to_uint(std::string_view key, const GgufValue& v) const;

  std::string source_;
  std::vector<std::pair<std::string, GgufValue>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace hearth
