// What an MLX affine quantized matmul kernel reads, unpacked from a QuantizedMatrix once for
// every backend (core/quant.h gives the layout). Pointers are on the matrix's device.
#pragma once

#include <cstdint>

#include "core/quant.h"

namespace hearth {

struct AffineArgs {
  const uint32_t* packed;  // [N, K * bits / 32] (rows layout) or 16-row panels
  const void* scales;      // [N, K / group_size] of scale_type
  const void* biases;      // the same, or null for symmetric codes
  DType scale_type;
  int bits;
  int group_size;
  int64_t N, K;
  bool panels = false;  // AffineLayout::kPanels16
};

inline AffineArgs affine_args(const QuantizedMatrix& w) {
  return {static_cast<const uint32_t*>(w.packed.raw()),
          w.scales.raw(),
          w.biases.defined() ? w.biases.raw() : nullptr,
          w.scales.dtype(),
          w.spec.bits,
          w.spec.group_size,
          w.rows,
          w.cols,
          w.layout == AffineLayout::kPanels16};
}

}  // namespace hearth
