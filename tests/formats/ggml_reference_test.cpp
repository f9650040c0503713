// Hearth's GGUF block codecs against llama.cpp's own (tests/data/ggml/reference_blocks.safetensors,
// made by scripts/fixtures/ggml_reference_blocks.py from the prebuilt libggml-base.so of
// node-llama-cpp 3.21.1): six rows of 512 values chosen for the codecs' corners, quantized by
// ggml_quantize_chunk (the reference quantizers llama-quantize uses without an importance
// matrix) and decoded by ggml's to_float. gguf_test.cpp packs blocks from Hearth's reading of the
// layouts; this checks that reading against the code that writes the files users download.
// - Decoding ggml's blocks gives ggml's values, bit for bit (Q4_0, Q8_0, Q4_K, Q6_K), on both
//   layouts the CPU backend keeps (the file's blocks, and the lanes it repacks K-quants into).
// - Hearth's quantizers (Q4_0, Q8_0, Q6_K: what `convert --to gguf` writes) give ggml's blocks,
//   byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/ggml_blocks.h"
#include "formats/ggml_quants.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace hearth {
namespace {

struct Reference {
  std::shared_ptr<SafetensorsFile> file;
  int64_t rows = 0, n = 0;

  Reference() : file(SafetensorsFile::open(testing::data_path("ggml/reference_blocks.safetensors"))) {
    const Tensor x = get("x");
    rows = x.dim(0);
    n = x.dim(1);
  }
  Tensor get(const std::string& name) const {
    const SafetensorsEntry* e = file->find(name);
    if (e == nullptr) throw std::runtime_error("reference_blocks.safetensors has no " + name);
    return file->tensor(*e);
  }
};

struct Type {
  std::string name;  // as in the fixture: q4_0, q8_0, q4_k, q6_k
  GgmlType type;
};
void PrintTo(const Type& t, std::ostream* os) { *os << t.name; }

class GgmlReference : public ::testing::TestWithParam<Type> {};

TEST_P(GgmlReference, DecodesGgmlsBlocksAsGgmlDoes) {
  const Type& t = GetParam();
  const Reference ref;
  const Tensor blocks = ref.get(t.name + ".blocks"), want = ref.get(t.name + ".dequantized");
  const uint64_t row_bytes = hearth::row_bytes(t.type, ref.n);
  ASSERT_EQ(blocks.dim(1), static_cast<int64_t>(row_bytes));
  std::vector<float> got(static_cast<size_t>(ref.n));
  for (int64_t r = 0; r < ref.rows; ++r) {
    const uint8_t* row = blocks.data<uint8_t>() + r * row_bytes;
    const float* expected = want.data<float>() + r * ref.n;
    dequantize_row(t.type, row, got.data(), ref.n);
    for (int64_t k = 0; k < ref.n; ++k) {
      ASSERT_EQ(std::memcmp(&got[k], &expected[k], sizeof(float)), 0)
          << "row " << r << " element " << k << ": " << got[k] << " against ggml's " << expected[k];
    }
    if (t.type == GgmlType::kQ4_K || t.type == GgmlType::kQ6_K) {  // the CPU backend's repacked lanes
      std::vector<uint8_t> lanes(row_bytes);
      const int64_t n_blocks = ref.n / 256;
      if (t.type == GgmlType::kQ4_K) q4_k_blocks_to_lanes(row, lanes.data(), n_blocks);
      if (t.type == GgmlType::kQ6_K) q6_k_blocks_to_lanes(row, lanes.data(), n_blocks);
      dequantize_lanes(t.type, lanes.data(), got.data(), ref.n);
      EXPECT_EQ(std::memcmp(got.data(), expected, ref.n * sizeof(float)), 0) << "lanes, row " << r;
    }
  }
}

class GgmlReferenceQuantizer : public ::testing::TestWithParam<Type> {};

TEST_P(GgmlReferenceQuantizer, QuantizesAsGgmlDoes) {
  const Type& t = GetParam();
  const Reference ref;
  const Tensor x = ref.get("x"), want = ref.get(t.name + ".blocks");
  const uint64_t row_bytes = hearth::row_bytes(t.type, ref.n);
  std::vector<uint8_t> got(row_bytes);
  for (int64_t r = 0; r < ref.rows; ++r) {
    const float* row = x.data<float>() + r * ref.n;
    switch (t.type) {
      case GgmlType::kQ4_0: quantize_row_q4_0(row, reinterpret_cast<BlockQ4_0*>(got.data()), ref.n); break;
      case GgmlType::kQ8_0: quantize_row_q8_0(row, reinterpret_cast<BlockQ8_0*>(got.data()), ref.n); break;
      case GgmlType::kQ6_K: quantize_row_q6_K(row, reinterpret_cast<BlockQ6_K*>(got.data()), ref.n); break;
      default: FAIL();
    }
    const uint8_t* expected = want.data<uint8_t>() + r * row_bytes;
    for (uint64_t b = 0; b < row_bytes; ++b) {
      ASSERT_EQ(got[b], expected[b]) << "row " << r << " byte " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlReference,
                         ::testing::Values(Type{"q4_0", GgmlType::kQ4_0}, Type{"q8_0", GgmlType::kQ8_0},
                                           Type{"q4_k", GgmlType::kQ4_K}, Type{"q6_k", GgmlType::kQ6_K}),
                         [](const auto& info) { return info.param.name; });
// The types Hearth writes (no Q4_K).
INSTANTIATE_TEST_SUITE_P(Types, GgmlReferenceQuantizer,
                         ::testing::Values(Type{"q4_0", GgmlType::kQ4_0}, Type{"q8_0", GgmlType::kQ8_0},
                                           Type{"q6_k", GgmlType::kQ6_K}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace hearth
