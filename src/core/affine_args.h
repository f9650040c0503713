// What an MLX affine quantized matmul kernel reads, unpacked from a QuantizedMatrix once for
// every backend (core/quant.h gives the layout). Pointers are on the matrix's device.
#pragma once

#include <cstdint>

#include "core/quant.h"

namespace hearth {

struct AffineArgs {
  const uint32_t* packed;  // [N, K * bits / 32] (rows layout) or 16-row panels (their parameters inside)
  const void* scales;      // [N, K / group_size] of scale_type; null for panels
  const void* biases;      // the same, or null for symmetric codes or panels
  DType scale_type;
  int bits;
  int group_size;
  int64_t N, K;
  bool panels = false;  // AffineLayout::kPanels16
  PanelLayout panel{};  // where a panel's codes and parameters lie (panels)
  // Whether there are biases (else the codes are symmetric around 2^(bits-1)).
  bool has_biases() const { return panels ? panel.biases : biases != nullptr; }
};

inline AffineArgs affine_args(const QuantizedMatrix& w) {
  const bool panels = w.layout == AffineLayout::kPanels16;
  return {static_cast<const uint32_t*>(w.packed.raw()),
          panels ? nullptr : w.scales.raw(),
          !panels && w.biases.defined() ? w.biases.raw() : nullptr,
          panels ? w.param_type : w.scales.dtype(),
          w.spec.bits,
          w.spec.group_size,
          w.rows,
          w.cols,
          panels,
          panels ? panel_layout(w) : PanelLayout{}};
}

}  // namespace hearth
