// Host tensors: large zeroed buffers lie on whole, aligned 2 MiB pages (so that transparent huge
// pages can back all of a streamed weight matrix), mid-sized ones share such pages, and all read
// as zeros and keep their bytes apart.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hearth {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

TEST(Tensor, LargeZeroedBuffersStartOnHugePageBoundaries) {
  // 1.2 MiB (a small k projection at 4 bits), 6 MiB + 4 KiB (not a whole number of pages) and
  // 5 MiB: each starts on a 2 MiB boundary and reads as zeros to its last byte.
  std::vector<Tensor> kept;
  for (const int64_t bytes : {int64_t{1258291}, int64_t{(6 << 20) + 4096}, int64_t{5 << 20}}) {
    Tensor t = Tensor::zeros({bytes}, DType::kU8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kHugePage, 0u) << bytes << " bytes";
    const auto* b = t.data<uint8_t>();
    EXPECT_EQ(b[0], 0);
    EXPECT_EQ(b[bytes - 1], 0);
    kept.push_back(t);
  }
  // Writing one to its last byte leaves the others untouched: their ranges do not overlap.
  uint8_t* first = kept[0].data<uint8_t>();
  for (int64_t i = 0; i < kept[0].numel(); ++i) first[i] = 0xab;
  EXPECT_EQ(kept[1].data<uint8_t>()[0], 0);
  EXPECT_EQ(kept[2].data<uint8_t>()[0], 0);
  EXPECT_EQ(first[kept[0].numel() - 1], 0xab);
}

TEST(Tensor, MidSizedZeroedBuffersShareHugePageChunks) {
  // 100 KB buffers (a panel matrix's scales) follow one another in a chunk, 64-byte aligned, or
  // the next one opens a new chunk on a 2 MiB boundary; each reads as zeros and owns its bytes.
  std::vector<Tensor> kept;
  for (int i = 0; i < 100; ++i) {
    kept.push_back(Tensor::zeros({25000}, DType::kF32));
    const auto at = reinterpret_cast<uintptr_t>(kept.back().raw());
    EXPECT_EQ(at % 64, 0u);
    if (i > 0) {
      const auto before = reinterpret_cast<uintptr_t>(kept[i - 1].raw());
      EXPECT_TRUE(at == before + 100032 || at % kHugePage == 0) << i;
    }
    const float* f = kept.back().data<float>();
    EXPECT_EQ(f[0], 0.0f);
    EXPECT_EQ(f[24999], 0.0f);
    float* w = kept.back().data<float>();
    for (int64_t j = 0; j < 25000; ++j) w[j] = static_cast<float>(i + 1);
  }
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(kept[i].data<float>()[0], static_cast<float>(i + 1));
    EXPECT_EQ(kept[i].data<float>()[24999], static_cast<float>(i + 1));
  }
}

TEST(Tensor, SmallZeroedBuffersAreZero) {
  const Tensor t = Tensor::zeros({1000}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace hearth
