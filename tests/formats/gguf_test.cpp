// GGUF: writer -> reader round trips, the ggml block formats (quantizer rounding, error bounds,
// K-quant layouts checked against an encoder written here from the documented layout), and
// malformed files, each of which must be a one-line FileError naming the problem.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/dtype.h"
#include "formats/ggml_quants.h"
#include "formats/gguf_model.h"
#include "formats/gguf_tokenizer.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Parses an exact-size heap copy, so the sanitizers see any read past the end.
GgufHeader parse_bytes(const std::string& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  return parse_gguf(copy.get(), bytes.size(), "test.gguf");
}

// ---- hand-built images, for fields the writer would never produce ----

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
void put_kv(std::string& out, const std::string& key, const GgufValue& v) {
  put_str(out, key);
  put<uint32_t>(out, static_cast<uint32_t>(v.type()));
  append_gguf_value(out, v);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

// header | kvs (raw bytes) | tensor infos | pad to `alignment` | `data_bytes` zeros
std::string image(const std::string& kvs, uint64_t n_kv, const std::vector<TensorSpec>& tensors, size_t data_bytes,
                  uint32_t version = 3, size_t alignment = 32) {
  std::string out = "GGUF";
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensors.size());
  put<uint64_t>(out, n_kv);
  out += kvs;
  for (const TensorSpec& t : tensors) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, t.offset);
  }
  out.append((alignment - out.size() % alignment) % alignment, '\0');
  return out + std::string(data_bytes, '\0');
}
std::string kv(const std::string& key, const GgufValue& v) {
  std::string out;
  put_kv(out, key, v);
  return out;
}
const std::vector<TensorSpec> kOneF32 = {{"w", {4, 2}, 0, 0}};  // 32 bytes

TEST(GgufTest, MalformedFilesAreFileErrorsNamingTheProblem) {
  const std::string arch = kv("general.architecture", "llama");
  std::string huge_key;  // a key whose length runs past the end
  put<uint64_t>(huge_key, 1ull << 40);
  std::string huge_string_value = arch.substr(0, 8 + 20);  // key only, then a string value
  put<uint32_t>(huge_string_value, 8);
  put<uint64_t>(huge_string_value, ~0ull);
  std::string huge_u64_array;  // 2^61 u64 elements: count * 8 overflows 64 bits
  put_str(huge_u64_array, "a");
  put<uint32_t>(huge_u64_array, 9);
  put<uint32_t>(huge_u64_array, 10);
  put<uint64_t>(huge_u64_array, 1ull << 61);
  std::string bad_bool;
  put_str(bad_bool, "b");
  put<uint32_t>(bad_bool, 7);
  put<uint8_t>(bad_bool, 2);
  std::string bad_value_type;
  put_str(bad_value_type, "c");
  put<uint32_t>(bad_value_type, 13);
  GgufArray deep = GgufArray::of(std::vector<int32_t>{1});
  for (int i = 0; i < 9; ++i) deep = GgufArray::of(std::vector<GgufArray>{deep});
  const std::string valid = image(arch, 1, kOneF32, 32);
  std::string bad_magic = valid, be_magic = valid;
  bad_magic[3] = 'X';
  std::memcpy(be_magic.data(), "FUGG", 4);
  std::string many_tensors = valid;  // tensor count field
  const uint64_t huge = 1ull << 60;
  std::memcpy(many_tensors.data() + 8, &huge, 8);
  std::string many_kvs = valid;
  std::memcpy(many_kvs.data() + 16, &huge, 8);

  const struct {
    const char* name;
    std::string bytes;
    const char* message;
  } cases[] = {
      {"empty file", "", "truncated file: magic"},
      {"bad magic", bad_magic, "bad magic 'GGUX'"},
      {"big-endian magic", be_magic, "big-endian"},
      {"version 1", image(arch, 1, kOneF32, 32, 1), "unsupported GGUF version 1"},
      {"version 4", image(arch, 1, kOneF32, 32, 4), "unsupported GGUF version 4"},
      {"byte-swapped version", image(arch, 1, kOneF32, 32, 0x03000000), "looks byte-swapped"},
      {"tensor count", many_tensors, "tensor count 1152921504606846976 cannot fit"},
      {"metadata count", many_kvs, "metadata count 1152921504606846976 cannot fit"},
      {"key length past EOF", image(huge_key, 1, {}, 32), "key of 1099511627776 bytes at offset 32 runs past the end"},
      {"string length past EOF", image(huge_string_value, 1, {}, 32), "string value of 18446744073709551615 bytes"},
      {"array count * size overflow", image(huge_u64_array, 1, {}, 32), "array of 2305843009213693952 u64 elements"},
      {"bool not 0/1", image(bad_bool, 1, {}, 32), "bool value is 2"},
      {"unknown value type", image(bad_value_type, 1, {}, 32), "unknown value type id 13"},
      {"empty key", image(kv("", uint8_t{1}), 1, {}, 32), "metadata key 0: empty key"},
      {"duplicate key", image(arch + arch, 2, {}, 0), "duplicate key 'general.architecture'"},
      {"nested too deep", image(kv("deep", deep), 1, {}, 0), "arrays nested deeper than 8"},
      {"alignment type", image(kv("general.alignment", uint64_t{32}), 1, kOneF32, 32), "must be a u32, got u64"},
      {"alignment value", image(kv("general.alignment", uint32_t{48}), 1, kOneF32, 32), "48 is not a power of two"},
      {"n_dims 5", image(arch, 1, {{"w", {1, 1, 1, 1, 1}, 0, 0}}, 32), "tensor 'w': n_dims 5 exceeds"},
      {"ne0*ne1 > 2^63", image(arch, 1, {{"w", {1ull << 32, 1ull << 31}, 0, 0}}, 32), "overflows int64"},
      {"ne0 * ne1 = 2^64", image(arch, 1, {{"w", {1ull << 32, 1ull << 32}, 0, 0}}, 32), "overflows int64"},
      {"ne negative", image(arch, 1, {{"w", {~0ull}, 0, 0}}, 32), "ne[0] = 18446744073709551615 exceeds int64"},
      {"bytes overflow", image(arch, 1, {{"w", {1ull << 62}, 0, 0}}, 32), "tensor 'w': byte size overflows"},
      {"unknown type", image(arch, 1, {{"w", {8}, 99, 0}}, 32), "tensor 'w': unknown ggml type id 99"},
      {"removed type", image(arch, 1, {{"w", {32}, 4, 0}}, 32), "unknown ggml type id 4"},
      {"block size", image(arch, 1, {{"w", {33}, 8, 0}}, 64), "ne[0] = 33 is not a multiple of the Q8_0 block size"},
      {"misaligned offset", image(arch, 1, {{"w", {1}, 0, 4}}, 32), "offset 4 is not a multiple of the alignment 32"},
      {"offset beyond the file", image(arch, 1, {{"w", {8}, 0, 1 << 20}}, 32), "runs past the end of the 32-byte"},
      {"data past EOF", image(arch, 1, {{"w", {16}, 0, 0}}, 32), "truncated file?"},
      {"no data section", image(arch, 1, kOneF32, 0).substr(0, 24 + 45 + 41), "data section would start at offset 128"},
      {"duplicate tensor", image(arch, 1, {{"w", {8}, 0, 0}, {"w", {8}, 0, 32}}, 64), "duplicate tensor name 'w'"},
      {"overlap", image(arch, 1, {{"a", {16}, 0, 0}, {"b", {8}, 0, 32}}, 96), "'b' at data offset 32 overlaps"},
      {"out of order", image(arch, 1, {{"a", {8}, 0, 32}, {"b", {8}, 0, 0}}, 64), "overlaps or precedes 'a'"},
      {"empty name", image(arch, 1, {{"", {8}, 0, 0}}, 32), "tensor 0: empty name"},
      {"long name", image(arch, 1, {{std::string(65, 'n'), {8}, 0, 0}}, 32), "over GGUF's limit of 64"},
  };
  EXPECT_NO_THROW(parse_bytes(valid));
  for (const auto& c : cases) {
    try {
      parse_bytes(c.bytes);
      ADD_FAILURE() << c.name << ": parsed";
    } catch (const FileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(c.message), std::string::npos) << c.name << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << c.name;
      EXPECT_EQ(what.rfind("test.gguf: ", 0), 0u) << what;
    }
  }
}

// A small file with every value type, nested arrays and several tensor types; its last
// tensor ends on an alignment boundary, so every proper prefix is truncated.
std::string write_small_file(const TempDir& dir) {
  const std::string path = dir.file("small.gguf");
  GgufWriter w(path);
  w.set_metadata("general.architecture", "llama");
  w.set_metadata("a.u8", uint8_t{7});
  w.set_metadata("a.f64", 2.5);
  w.set_metadata("a.bool", true);
  w.set_metadata("a.strings", std::vector<std::string>{"x", "", "yz"});
  w.set_metadata("a.nested", std::vector<GgufArray>{GgufArray::of(std::vector<int16_t>{-1, 2})});
  const std::vector<float> f = random_floats(64, 1.0f, 1);
  std::vector<BlockQ8_0> q(2);
  quantize_row_q8_0(f.data(), q.data(), 64);
  w.add_tensor("q", GgmlType::kQ8_0, {64});
  w.add_tensor("f", GgmlType::kF32, {2, 4});
  w.write_tensor_data("q", q.data(), sizeof(BlockQ8_0) * 2);
  w.write_tensor_data("f", f.data(), 32);
  w.finish();
  return read_file(path);
}

TEST(GgufTest, EveryTruncationIsAFileError) {
  TempDir dir;
  const std::string bytes = write_small_file(dir);
  ASSERT_LT(bytes.size(), 1024u);
  ASSERT_NO_THROW(parse_bytes(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      parse_bytes(bytes.substr(0, n));
      ADD_FAILURE() << "prefix of " << n << " bytes parsed";
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << n << ": " << e.what();
    }
  }
}

TEST(GgufTest, MetadataRoundTripsWithEveryType) {
  TempDir dir;
  GgufMetadata want;
  want.set("t.u8", uint8_t{200});
  want.set("t.i8", int8_t{-5});
  want.set("t.u16", uint16_t{60000});
  want.set("t.i16", int16_t{-30000});
  want.set("t.u32", uint32_t{4000000000u});
  want.set("t.i32", int32_t{-2000000000});
  want.set("t.f32", 1.5f);
  want.set("t.bool", false);
  want.set("t.string", std::string("h\xc3\xa9llo"));
  want.set("t.u64", uint64_t{1} << 40);
  want.set("t.i64", -(int64_t{1} << 40));
  want.set("t.f64", 3.141592653589793);
  want.set("t.strings", std::vector<std::string>{"a", "", "ccc"});
  want.set("t.i32s", std::vector<int32_t>{1, -2, 3});
  want.set("t.u64s", std::vector<uint64_t>{1, uint64_t{1} << 63});
  want.set("t.f32s", std::vector<float>{0.5f, -1.0f});
  want.set("t.bools", std::vector<bool>{true, false, true});
  want.set("t.empty", std::vector<uint8_t>{});
  want.set("t.nested", std::vector<GgufArray>{GgufArray::of(std::vector<int32_t>{4, 5}),
                                              GgufArray::of(std::vector<std::string>{"s"})});
  const std::string path = dir.file("meta.gguf");
  GgufWriter w(path);
  for (const auto& [key, value] : want.entries()) w.set_metadata(key, value);
  w.finish();

  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->header().version, 3u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().entries(), want.entries());
  const GgufMetadata& m = f->metadata();
  EXPECT_EQ(m.get_int("t.i8"), -5);
  EXPECT_EQ(m.get_int("t.u32"), 4000000000);
  EXPECT_EQ(m.get_uint("t.u8"), 200u);
  EXPECT_EQ(m.get_float("t.f32"), 1.5);
  EXPECT_EQ(m.get_string("t.string"), "h\xc3\xa9llo");
  EXPECT_EQ(m.get_string_array("t.strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(m.get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(m.get_float_array("t.f32s"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(m.get_bool_or("t.absent", true), true);
  EXPECT_EQ(m.get_int_or("t.absent", 9), 9);
  const auto message = [&](auto fn) {
    try {
      fn();
    } catch (const FileError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { m.get_string("t.u32"); }), path + ": metadata key 't.u32': expected a string, got u32");
  EXPECT_EQ(message([&] { m.get_int("t.strings"); }),
            path + ": metadata key 't.strings': expected an integer, got array of string");
  EXPECT_EQ(message([&] { m.get_uint("t.i8"); }),
            path + ": metadata key 't.i8': negative value where a count is expected");
  EXPECT_EQ(message([&] { m.get_int_array("t.u64s"); }),
            path + ": metadata key 't.u64s': value 9223372036854775808 exceeds int64");
  EXPECT_EQ(message([&] { m.get_float_or("t.bool", 1.0); }),
            path + ": metadata key 't.bool': expected a float (f32 or f64), got bool");
  EXPECT_EQ(message([&] { m.get_bool("t.nope"); }), path + ": missing metadata key 't.nope'");
}

TEST(GgufTest, TensorsRoundTripInTorchOrder) {
  TempDir dir;
  const std::string path = dir.file("tensors.gguf");
  const std::vector<float> f32 = random_floats(3 * 5, 1.0f, 2), row64 = random_floats(3 * 64, 0.1f, 3);
  std::vector<uint16_t> f16(2 * 64), bf16(4 * 8);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = f32_to_f16(row64[i]);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = f32_to_bf16(row64[i]);
  std::vector<BlockQ8_0> q8(6);
  std::vector<BlockQ4_0> q4(2);
  quantize_row_q8_0(row64.data(), q8.data(), 3 * 64);
  quantize_row_q4_0(row64.data(), q4.data(), 64);
  GgufWriter w(path, {.alignment = 64});
  w.set_metadata("general.architecture", "llama");
  w.add_tensor("f32", GgmlType::kF32, {3, 5});
  w.add_tensor("f16", GgmlType::kF16, {2, 64});
  w.add_tensor("bf16", GgmlType::kBF16, {4, 8});
  w.add_tensor("q8", GgmlType::kQ8_0, {3, 64});
  w.add_tensor("q4", GgmlType::kQ4_0, {2, 1, 32});
  w.write_tensor("f32", Tensor::from_f32({3, 5}, f32.data()));
  w.write_tensor_data("f16", f16.data(), f16.size() * 2);
  w.write_tensor_data("bf16", bf16.data(), bf16.size() * 2);
  w.write_tensor_data("q8", q8.data(), q8.size() * sizeof(BlockQ8_0));
  w.write_tensor_data("q4", q4.data(), q4.size() * sizeof(BlockQ4_0));
  w.finish();

  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->header().alignment, 64u);
  EXPECT_EQ(f->metadata().find("general.alignment")->type(), GgufValueType::kU32);
  EXPECT_EQ(f->header().data_offset % 64, 0u);
  ASSERT_EQ(f->tensors().size(), 5u);
  for (const GgufTensorInfo& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  const GgufTensorInfo* t = f->find("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->n_dims, 2);
  EXPECT_EQ(t->ne[0], 5);  // innermost first
  EXPECT_EQ(t->ne[1], 3);
  EXPECT_EQ(t->shape(), (Shape{3, 5}));
  Tensor v = f->view(*t);
  EXPECT_EQ(v.dtype(), DType::kF32);
  EXPECT_TRUE(v.is_view_of_external());
  EXPECT_EQ(std::memcmp(v.raw(), f32.data(), 60), 0);
  EXPECT_EQ(std::memcmp(f->dequantize(*t).raw(), f32.data(), 60), 0);

  Tensor h = f->view(*f->find("f16"));
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.shape(), (Shape{2, 64}));
  EXPECT_EQ(std::memcmp(h.raw(), f16.data(), f16.size() * 2), 0);
  const Tensor hd = f->dequantize(*f->find("f16"));
  for (size_t i = 0; i < f16.size(); ++i) ASSERT_EQ(hd.data<float>()[i], f16_to_f32(f16[i])) << i;
  const Tensor bd = f->dequantize(*f->find("bf16"));
  for (size_t i = 0; i < bf16.size(); ++i) ASSERT_EQ(bd.data<float>()[i], bf16_to_f32(bf16[i])) << i;

  const GgufTensorInfo* q = f->find("q8");
  EXPECT_EQ(q->type, GgmlType::kQ8_0);
  EXPECT_EQ(q->nbytes, 6 * sizeof(BlockQ8_0));
  const Tensor qv = f->view(*q);
  EXPECT_EQ(qv.dtype(), DType::kU8);
  EXPECT_EQ(qv.shape(), (Shape{3, 68}));  // rows of blocks
  EXPECT_EQ(std::memcmp(qv.raw(), q8.data(), q->nbytes), 0);
  EXPECT_EQ(f->raw(*q).shape(), (Shape{static_cast<int64_t>(q->nbytes)}));
  std::vector<float> want(3 * 64);
  dequantize_row(GgmlType::kQ8_0, q8.data(), want.data(), 3 * 64);
  const Tensor qd = f->dequantize(*q);
  EXPECT_EQ(qd.shape(), (Shape{3, 64}));
  EXPECT_EQ(std::memcmp(qd.raw(), want.data(), want.size() * 4), 0);
  const GgufTensorInfo* q4i = f->find("q4");
  EXPECT_EQ(q4i->shape(), (Shape{2, 1, 32}));
  EXPECT_EQ(f->view(*q4i).shape(), (Shape{2, 1, 18}));
  dequantize_row(GgmlType::kQ4_0, q4.data(), want.data(), 64);
  EXPECT_EQ(std::memcmp(f->dequantize(*q4i).raw(), want.data(), 64 * 4), 0);
}

// Metadata strings reach the model's config and tokenizer.json as JSON strings: bytes that are not
// UTF-8 must be a FileError naming the file, not a JSON library exception (gguf_model_fuzz).
TEST(GgufTest, ModelMetadataThatIsNotUtf8IsAFileError) {
  TempDir dir;
  const std::string path = dir.file("bad_utf8.gguf");
  GgufWriter w(path);
  w.set_metadata("general.architecture", std::string("llama"));
  for (const char* key : {"llama.block_count", "llama.context_length", "llama.embedding_length",
                          "llama.feed_forward_length", "llama.attention.head_count"})
    w.set_metadata(key, uint32_t{8});
  w.set_metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_metadata("llama.rope.scaling.type", std::string("lin\xfe\xff") + "ear");
  w.set_metadata("tokenizer.ggml.model", std::string("gpt2"));
  w.set_metadata("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b\xfe", "ab"});
  w.set_metadata("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  w.finish();
  const auto f = GgufFile::open(path);
  for (const auto& load : {std::function<void()>([&] { (void)gguf_hf_config(*f); }),
                           std::function<void()>([&] { (void)gguf_tokenizer(*f); })}) {
    try {
      load();
      ADD_FAILURE() << "no error";
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
  }
}

TEST(GgufTest, ReadsVersion2AndRefusesUnsupportedTypesOnUse) {
  TempDir dir;
  const std::string path = dir.file("v2.gguf");
  // Q5_K (176-byte blocks of 256): sized and accepted at open, refused when used.
  const std::string bytes = image(kv("general.architecture", "llama"), 1, {{"k", {256}, 13, 0}}, 176, 2);
  std::ofstream(path, std::ios::binary) << bytes;
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->header().version, 2u);
  const GgufTensorInfo& t = f->tensors().at(0);
  EXPECT_EQ(t.nbytes, 176u);
  EXPECT_EQ(f->raw(t).nbytes(), 176u);
  for (auto use : {+[](const GgufFile&g, const GgufTensorInfo&x) { g.view(x); },
                   +[](const GgufFile&g, const GgufTensorInfo&x) { g.dequantize(x); }}) {
    try {
      use(*f, t);
      ADD_FAILURE() << "Q5_K used";
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'k' has ggml type Q5_K"), std::string::npos) << e.what();
    }
  }
}

TEST(GgufTest, WriterChecksItsInputAndPublishesAtomically) {
  TempDir dir;
  const std::string path = dir.file("out.gguf");
  {
    GgufWriter w(path);
    w.add_tensor("a", GgmlType::kF32, {2});
    EXPECT_THROW(w.add_tensor("a", GgmlType::kF32, {2}), InputError);
    EXPECT_THROW(w.add_tensor(std::string(64, 'n'), GgmlType::kF32, {2}), InputError);
    EXPECT_THROW(w.add_tensor("r5", GgmlType::kF32, {1, 1, 1, 1, 1}), InputError);
    EXPECT_THROW(w.add_tensor("odd", GgmlType::kQ8_0, {2, 33}), InputError);
    EXPECT_THROW(w.set_metadata("general.alignment", uint32_t{64}), InputError);
    w.add_tensor("b", GgmlType::kF32, {1});
    const float x[2] = {1, 2};
    EXPECT_THROW(w.write_tensor_data("b", x, 4), InputError);  // declaration order
    EXPECT_THROW(w.write_tensor_data("a", x, 4), InputError);  // size
    w.write_tensor_data("a", x, 8);
    EXPECT_THROW(w.finish(), InputError);  // 'b' never written
    EXPECT_FALSE(fs::exists(path));
  }  // destroyed without finish: the staging file goes
  EXPECT_TRUE(fs::is_empty(dir.path()));
  std::ofstream(path) << "";  // an empty destination may be replaced
  {
    GgufWriter w(path);
    w.finish();
  }
  EXPECT_NO_THROW(GgufFile::open(path));
  EXPECT_THROW(GgufWriter w(path), FileError);  // non-empty: refused without overwrite
  {
    GgufWriter w(path, {.overwrite = true});
    w.set_metadata("k", "v");
    w.finish();
  }
  EXPECT_EQ(GgufFile::open(path)->metadata().get_string("k"), "v");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

// ---- the block formats ----

TEST(GgmlQuantsTest, RowBytes) {
  EXPECT_EQ(row_bytes(GgmlType::kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_K, 512), 288u);
  EXPECT_EQ(row_bytes(GgmlType::kQ6_K, 256), 210u);
  EXPECT_EQ(row_bytes(GgmlType::kBF16, 3), 6u);
  EXPECT_THROW(row_bytes(GgmlType::kQ8_0, 33), InputError);
  EXPECT_THROW(row_bytes(GgmlType::kF32, -1), InputError);
  EXPECT_THROW(row_bytes(GgmlType::kF64, int64_t{1} << 62), InputError);  // 2^65 bytes
}

// Rounding as ggml's reference quantizers: Q8_0 rounds half away from zero; Q4_0 truncates
// x/d + 8.5 and clamps at 15, with d signed so the first largest-magnitude element is -8.
TEST(GgmlQuantsTest, QuantizersRoundAsGgml) {
  float x[32] = {127, 63.5f, -63.5f, 0.5f, -0.5f, 2.5f, 1.49f, -126.5f};
  BlockQ8_0 q8;
  quantize_row_q8_0(x, &q8, 32);
  EXPECT_EQ(q8.d, 0x3C00);  // 1.0
  const int want8[8] = {127, 64, -64, 1, -1, 3, 1, -127};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q8.qs[j], want8[j]) << j;

  float y[64] = {-8, 8, 0, 7, 7.5f, 7.49f, -0.5f, 0.5f, 0.49f, -7.6f};
  y[32] = 8, y[33] = -8, y[34] = 1, y[35] = -1;  // second block: max is +8, so d = -1
  BlockQ4_0 q4[2];
  quantize_row_q4_0(y, q4, 64);
  EXPECT_EQ(q4[0].d, 0x3C00);
  EXPECT_EQ(q4[1].d, 0xBC00);
  const int want4[10] = {0, 15, 8, 15, 15, 15, 8, 9, 8, 0};
  for (int j = 0; j < 10; ++j) EXPECT_EQ(q4[0].qs[j] & 0xF, want4[j]) << j;
  const int want4b[4] = {0, 15, 7, 9};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(q4[1].qs[j] & 0xF, want4b[j]) << j;
  EXPECT_EQ(q4[0].qs[0] >> 4, 8);  // element 16 (zero) is the high nibble of byte 0
}

TEST(GgmlQuantsTest, QuantizeDequantizeErrorWithinBound) {
  std::vector<float> x = random_floats(32 * 64, 1.0f, 4);
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;         // an all-zero block
  for (int j = 0; j < 32; ++j) x[64 + j] *= 1000.0f;     // a large one
  for (int j = 0; j < 32; ++j) x[96 + j] = -0.001f * j;  // one-signed
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<BlockQ8_0> q8(n / 32);
  std::vector<BlockQ4_0> q4(n / 32);
  std::vector<float> y8(n), y4(n);
  quantize_row_q8_0(x.data(), q8.data(), n);
  quantize_row_q4_0(x.data(), q4.data(), n);
  dequantize_row(GgmlType::kQ8_0, q8.data(), y8.data(), n);
  dequantize_row(GgmlType::kQ4_0, q4.data(), y4.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(x[b * 32 + j]), max = x[b * 32 + j];
    // The stored scale is d rounded to f16, so an element with code q may be off by a
    // further |q| * |d - d16| beyond half a step.
    const float d8 = amax / 127, d8h = f16_to_f32(q8[b].d);
    const float d4 = -max / 8, d4h = f16_to_f32(q4[b].d);
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      const float slack = 1e-6f * amax;
      const int c8 = q8[b].qs[j];
      EXPECT_LE(std::fabs(x[i] - y8[i]), d8 / 2 + std::abs(c8) * std::fabs(d8 - d8h) + slack) << i;
      const int c4 = (j < 16 ? q4[b].qs[j] & 0xF : q4[b].qs[j - 16] >> 4) - 8;
      // Codes run -8..7: values beyond 7.5 steps clamp to 7 and may be off by up to one step.
      const float steps = d4 != 0 ? x[i] / d4 : 0;
      const float half = steps > 7.5f ? std::fabs(d4) : std::fabs(d4) / 2;
      EXPECT_LE(std::fabs(x[i] - y4[i]), half + std::abs(c4) * std::fabs(d4 - d4h) + slack) << i;
    }
  }
}

// Q4_K, packed here from the layout in docs/gguf.md: scales/mins 0-3 in the low 6 bits of
// bytes 0-3 / 4-7; 4-7 split into a low nibble (bytes 8-11: scale low, min high) and two high
// bits (the top bits of bytes 0-3 for scales, 4-7 for mins). Element e: sub-block e/32, code in
// qs[32*(e/64) + e%32], low nibble when e%64 < 32.
TEST(GgmlQuantsTest, DequantizeQ4K) {
  const uint8_t sc[8] = {1, 17, 63, 0, 33, 48, 5, 62}, mn[8] = {0, 63, 2, 40, 17, 1, 59, 32};
  std::vector<BlockQ4_K> blocks(2);
  for (int b = 0; b < 2; ++b) {
    BlockQ4_K& k = blocks[b];
    std::memset(&k, 0, sizeof k);
    k.d = f32_to_f16(b == 0 ? 1.5f : -0.75f);
    k.dmin = f32_to_f16(0.25f);
    for (int j = 0; j < 4; ++j) {
      k.scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
      k.scales[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
      k.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    for (int e = 0; e < 256; ++e) {
      const uint8_t code = static_cast<uint8_t>((e * 7 + 3 + b) % 16);
      k.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(e % 64 < 32 ? code : code << 4);
    }
  }
  std::vector<float> y(512);
  dequantize_row(GgmlType::kQ4_K, blocks.data(), y.data(), 512);
  for (int i = 0; i < 512; ++i) {
    const int b = i / 256, e = i % 256;
    const double d = b == 0 ? 1.5 : -0.75, code = (e * 7 + 3 + b) % 16;
    ASSERT_EQ(y[i], d * sc[e / 32] * code - 0.25 * mn[e / 32]) << i;  // exact: small dyadic values
  }
}

// Q6_K: element e = 128h + 32g + l (half h, quarter g) has scale scales[e/16]; its 6-bit code
// keeps the low nibble in ql[64h + l + 32*(g&1)] (high nibble when g >= 2) and the top two bits
// in bits 2g..2g+1 of qh[32h + l]; x = d * scale * (code - 32).
TEST(GgmlQuantsTest, DequantizeQ6K) {
  const int8_t scales[16] = {1, -1, 127, -128, 3, 7, -20, 45, 0, 2, -3, 64, 99, -77, 12, 5};
  std::vector<BlockQ6_K> blocks(2);
  for (int b = 0; b < 2; ++b) {
    BlockQ6_K& k = blocks[b];
    std::memset(&k, 0, sizeof k);
    k.d = f32_to_f16(b == 0 ? 0.5f : 0.125f);
    std::memcpy(k.scales, scales, 16);
    for (int e = 0; e < 256; ++e) {
      const int code = (e * 11 + 5 + b) % 64, h = e / 128, g = (e % 128) / 32, l = e % 32;
      const int lo = code & 15, hi = code >> 4;
      k.ql[64 * h + l + 32 * (g & 1)] |= static_cast<uint8_t>(g >= 2 ? lo << 4 : lo);
      k.qh[32 * h + l] |= static_cast<uint8_t>(hi << (2 * g));
    }
  }
  std::vector<float> y(512);
  dequantize_row(GgmlType::kQ6_K, blocks.data(), y.data(), 512);
  for (int i = 0; i < 512; ++i) {
    const int b = i / 256, e = i % 256;
    const double d = b == 0 ? 0.5 : 0.125;
    ASSERT_EQ(y[i], d * scales[e / 16] * ((e * 11 + 5 + b) % 64 - 32)) << i;
  }
}

TEST(GgmlQuantsTest, DequantizeRowRefusesUnsupportedTypes) {
  std::vector<uint8_t> src(176);
  std::vector<float> y(256);
  EXPECT_THROW(dequantize_row(GgmlType::kQ5_K, src.data(), y.data(), 256), Unsupported);
  EXPECT_THROW(dequantize_row(GgmlType::kQ8_0, src.data(), y.data(), 31), InputError);
}

}  // namespace
}  // namespace hearth
