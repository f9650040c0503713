#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/error.h"

namespace hearth {

void check_quant_spec(const QuantSpec& spec) {
  const int b = spec.bits;
  if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8) {
    throw InputError("quantization bits must be 2, 3, 4, 5, 6 or 8, got " + std::to_string(b));
  }
  const int g = spec.group_size;
  if (g != 32 && g != 64 && g != 128) {
    throw InputError("quantization group_size must be 32, 64 or 128, got " + std::to_string(g));
  }
}

void affine_quantize_row(const float* w, int64_t K, const QuantSpec& spec, uint32_t* packed, float* scales,
                         float* biases) {
  const float n_bins = static_cast<float>((1 << spec.bits) - 1);
  const float eps = 1e-7f;
  const int64_t words = K * spec.bits / 32;
  std::fill(packed, packed + words, 0u);
  for (int64_t g0 = 0, gi = 0; g0 < K; g0 += spec.group_size, ++gi) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int64_t k = g0; k < g0 + spec.group_size; ++k) {
      lo = std::min(lo, w[k]);
      hi = std::max(hi, w[k]);
    }
    // As MLX: the step spans [lo, hi]; its sign and anchor follow the larger-magnitude end,
    // which then maps exactly onto a code.
    const bool anchor_low = std::abs(lo) > std::abs(hi);
    float scale = std::max((hi - lo) / n_bins, eps);
    scale = anchor_low ? scale : -scale;
    const float edge = anchor_low ? lo : hi;
    const float q0 = std::rint(edge / scale);
    float bias = 0;
    if (q0 != 0) {
      scale = edge / q0;
      bias = edge;
    }
    for (int64_t k = g0; k < g0 + spec.group_size; ++k) {
      const float q = std::min(std::max(std::rint((w[k] - bias) / scale), 0.0f), n_bins);
      const auto code = static_cast<uint64_t>(q);
      const uint64_t bit = static_cast<uint64_t>(k) * static_cast<uint64_t>(spec.bits);
      const uint64_t word = bit >> 5, shift = bit & 31;
      packed[word] |= static_cast<uint32_t>(code << shift);
      if (shift + static_cast<uint64_t>(spec.bits) > 32)
        packed[word + 1] |= static_cast<uint32_t>(code >> (32 - shift));
    }
    scales[gi] = scale;
    biases[gi] = bias;
  }
}

void affine_dequantize_row(const uint32_t* packed, const float* scales, const float* biases, int64_t K,
                           const QuantSpec& spec, float* out) {
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = k / spec.group_size;
    out[k] = scales[g] * static_cast<float>(affine_code(packed, k, spec.bits)) + biases[g];
  }
}

namespace {

void check_shapes(int64_t N, int64_t K, const QuantSpec& spec) {
  check_quant_spec(spec);
  if (K % spec.group_size != 0) {
    throw InputError("cannot quantize a matrix with " + std::to_string(K) + " columns in groups of " +
                     std::to_string(spec.group_size));
  }
  (void)N;
}

std::vector<float> row_f32(const Tensor& t, int64_t row) {
  const int64_t cols = t.dim(1);
  std::vector<float> out(static_cast<size_t>(cols));
  const auto* base = static_cast<const uint8_t*>(t.raw()) + static_cast<size_t>(row * cols) * dtype_size(t.dtype());
  for (int64_t i = 0; i < cols; ++i) {
    switch (t.dtype()) {
      case DType::kF32: std::memcpy(&out[static_cast<size_t>(i)], base + i * 4, 4); break;
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, base + i * 2, 2);
        out[static_cast<size_t>(i)] = bf16_to_f32(h);
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, base + i * 2, 2);
        out[static_cast<size_t>(i)] = f16_to_f32(h);
        break;
      }
      default: throw InputError("cannot quantize a " + std::string(dtype_name(t.dtype())) + " tensor");
    }
  }
  return out;
}

void store(float v, DType t, void* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t h = t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(dst, &h, 2);
  }
}

float load(const void* src, DType t) {
  if (t == DType::kF32) {
    float v;
    std::memcpy(&v, src, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, src, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

QuantizedMatrix affine_quantize(const Tensor& w, const QuantSpec& spec, DType scale_dtype) {
  if (w.rank() != 2) throw InputError("quantize: expected a matrix, got " + w.str());
  if (!is_float(scale_dtype)) throw InputError("quantize: scales must be a float dtype");
  const int64_t N = w.dim(0), K = w.dim(1);
  check_shapes(N, K, spec);
  const int64_t groups = K / spec.group_size, words = K * spec.bits / 32;
  QuantizedMatrix q;
  q.spec = spec;
  q.rows = N;
  q.cols = K;
  q.packed = Tensor::empty({N, words}, DType::kU32);
  q.scales = Tensor::empty({N, groups}, scale_dtype);
  q.biases = Tensor::empty({N, groups}, scale_dtype);
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  const size_t es = dtype_size(scale_dtype);
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> row = row_f32(w, n);
    affine_quantize_row(row.data(), K, spec, q.packed.data<uint32_t>() + n * words, s.data(), b.data());
    for (int64_t g = 0; g < groups; ++g) {
      store(s[static_cast<size_t>(g)], scale_dtype, static_cast<uint8_t*>(q.scales.raw()) + (n * groups + g) * es);
      store(b[static_cast<size_t>(g)], scale_dtype, static_cast<uint8_t*>(q.biases.raw()) + (n * groups + g) * es);
    }
  }
  return q;
}

std::string QuantizedMatrix::str() const {
  std::string out;
  if (is_ggml() || symmetric()) {
    out = ggml_type_name(ggml_type);
  } else {
    out = "affine ";
    out += std::to_string(spec.bits);
    out += "-bit/";
    out += std::to_string(spec.group_size);
  }
  out += " ";
  out += Shape({rows, cols}).str();
  return out;
}

QuantizedMatrix ggml_quantized(GgmlType type, int64_t rows, int64_t cols, Tensor blocks) {
  if (!ggml_is_block_quantized(type)) {
    throw InputError("ggml type " + std::string(ggml_type_name(type)) +
                     " is not a block-quantized matrix type (Q8_0, Q4_0, Q4_K, Q6_K are)");
  }
  const Shape want({rows, static_cast<int64_t>(row_bytes(type, cols))});
  if (!blocks.defined() || blocks.dtype() != DType::kU8 || blocks.shape() != want) {
    throw InputError(std::string(ggml_type_name(type)) + " [" + std::to_string(rows) + ", " + std::to_string(cols) +
                     "]: expected blocks u8" + want.str() + ", got " + (blocks.defined() ? blocks.str() : "none"));
  }
  QuantizedMatrix q;
  q.format = QuantFormat::kGgml;
  q.ggml_type = type;
  q.rows = rows;
  q.cols = cols;
  q.packed = std::move(blocks);
  return q;
}

QuantizedMatrix ggml_to_lanes(const QuantizedMatrix& q) {
  const bool q6 = q.ggml_type == GgmlType::kQ6_K, q4 = q.ggml_type == GgmlType::kQ4_K;
  if (!q.is_ggml() || !(q6 || q4) || q.ggml_layout != GgmlLayout::kBlocks)
    throw InputError("only Q6_K and Q4_K blocks repack into lanes, not " + q.str());
  QuantizedMatrix out = q;
  out.ggml_layout = GgmlLayout::kLanes;
  out.packed = Tensor::empty(q.packed.shape(), DType::kU8);
  const int64_t blocks = q.packed.numel() / static_cast<int64_t>(ggml_type_info(q.ggml_type).block_bytes);
  (q6 ? q6_k_blocks_to_lanes : q4_k_blocks_to_lanes)(q.packed.data<uint8_t>(), out.packed.data<uint8_t>(), blocks);
  return out;
}

Tensor dequantize(const QuantizedMatrix& q) {
  if (!q.is_ggml()) return affine_dequantize(q);
  Tensor out = Tensor::empty({q.rows, q.cols}, DType::kF32);
  const int64_t rb = q.packed.dim(1);
  for (int64_t n = 0; n < q.rows; ++n) {
    dequantize_row(q.ggml_type, q.ggml_layout, q.packed.data<uint8_t>() + n * rb, out.data<float>() + n * q.cols,
                   q.cols);
  }
  return out;
}

Tensor affine_dequantize(const QuantizedMatrix& q) {
  const int64_t groups = q.cols / q.spec.group_size, words = q.cols * q.spec.bits / 32;
  const bool panels = q.layout == AffineLayout::kPanels16;
  Tensor out = Tensor::empty({q.rows, q.cols}, DType::kF32);
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  const PanelLayout l = panels ? panel_layout(q) : PanelLayout{};
  const auto* bytes = static_cast<const uint8_t*>(q.packed.raw());
  const DType st = panels ? q.param_type : q.scales.dtype();
  const size_t es = dtype_size(st);
  for (int64_t n = 0; n < q.rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const auto i = static_cast<size_t>(g);
      const size_t at = static_cast<size_t>(n * groups + g) * es;
      s[i] = panels ? panel_param(bytes, l, st, n, g, 0) : load(static_cast<const uint8_t*>(q.scales.raw()) + at, st);
      if (q.symmetric()) {
        b[i] = -static_cast<float>(1 << (q.spec.bits - 1)) * s[i];
      } else {
        b[i] = panels ? panel_param(bytes, l, st, n, g, 1) : load(static_cast<const uint8_t*>(q.biases.raw()) + at, st);
      }
    }
    float* row = out.data<float>() + n * q.cols;
    if (!panels) {
      affine_dequantize_row(q.packed.data<uint32_t>() + n * words, s.data(), b.data(), q.cols, q.spec, row);
      continue;
    }
    for (int64_t k = 0; k < q.cols; ++k) {
      const auto g = static_cast<size_t>(k / q.spec.group_size);
      row[k] = s[g] * static_cast<float>(panel_code(bytes, l, q.spec.bits, q.spec.group_size, n, k)) + b[g];
    }
  }
  return out;
}

PanelLayout panel_layout(int64_t K, int bits, int group_size, DType param_type, bool biases) {
  PanelLayout l;
  l.groups = K / group_size;
  l.code_bytes = int64_t{group_size} * bits / 8 * 16;
  l.param_size = static_cast<int64_t>(dtype_size(param_type));
  l.biases = biases;
  l.paired = biases && param_type == DType::kBF16;
  l.param_bytes = 16 * l.param_size * (biases ? 2 : 1);
  l.unit = panel_unit(l.param_bytes);
  l.unit_bytes = l.unit * (l.code_bytes + l.param_bytes);
  const int64_t whole = l.groups / l.unit, rest = l.groups % l.unit;
  l.panel_bytes = (whole * l.unit_bytes + rest * (l.code_bytes + l.param_bytes) + 63) / 64 * 64;
  return l;
}

float panel_param(const uint8_t* panels, const PanelLayout& l, DType param_type, int64_t n, int64_t g, int which) {
  return load(panels + n / 16 * l.panel_bytes + l.params_at(g) + l.param_offset(n % 16, which), param_type);
}

QuantizedMatrix affine_to_panels(const QuantizedMatrix& q) {
  if (q.is_ggml() || q.layout != AffineLayout::kRows || (q.spec.bits != 4 && q.spec.bits != 8))
    throw InputError("only 4- and 8-bit affine matrices in rows interleave into panels, not " + q.str());
  const int64_t N = q.rows, K = q.cols, P = (N + 15) / 16, groups = K / q.spec.group_size;
  const int bits = q.spec.bits;
  const int64_t per_step = bits == 8 ? 4 : 8, steps = q.spec.group_size / per_step, words = K * bits / 32;
  QuantizedMatrix out = q;
  out.layout = AffineLayout::kPanels16;
  out.param_type = q.scales.dtype();
  out.param_biases = q.biases.defined();
  out.scales = Tensor();
  out.biases = Tensor();
  const PanelLayout l = panel_layout(out);
  out.packed = Tensor::zeros({P, l.panel_bytes}, DType::kU8);
  uint8_t* dst = out.packed.data<uint8_t>();
  const size_t es = static_cast<size_t>(l.param_size);
  for (int64_t n = 0; n < N; ++n) {
    // A step's 4 bytes are 4 bytes of the row in both widths; 4 bits reorder their nibbles
    // from element order (k in nibble k) to byte i = (i, i + 4).
    const auto* row = reinterpret_cast<const uint8_t*>(q.packed.data<uint32_t>() + n * words);
    uint8_t* panel = dst + n / 16 * l.panel_bytes;
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* lane = panel + l.codes_at(g) + n % 16 * 4;
      for (int64_t j = 0; j < steps; ++j) {
        uint32_t w;
        std::memcpy(&w, row + (g * steps + j) * 4, 4);
        if (bits == 4) {
          uint32_t v = 0;
          for (int i = 0; i < 4; ++i)
            v |= ((w >> (4 * i)) & 0xfu) << (8 * i) | ((w >> (4 * i + 16)) & 0xfu) << (8 * i + 4);
          w = v;
        }
        std::memcpy(lane + j * 64, &w, 4);
      }
      uint8_t* params = panel + l.params_at(g);
      const size_t at = static_cast<size_t>(n * groups + g) * es;
      std::memcpy(params + l.param_offset(n % 16, 0), static_cast<const uint8_t*>(q.scales.raw()) + at, es);
      if (out.param_biases)
        std::memcpy(params + l.param_offset(n % 16, 1), static_cast<const uint8_t*>(q.biases.raw()) + at, es);
    }
  }
  return out;
}

QuantizedMatrix ggml_to_affine(const QuantizedMatrix& q) {
  const bool q4 = q.ggml_type == GgmlType::kQ4_0;
  if (!q.is_ggml() || !(q4 || q.ggml_type == GgmlType::kQ8_0))
    throw InputError("only Q4_0 and Q8_0 blocks map onto symmetric affine codes, not " + q.str());
  const int64_t blocks = q.cols / 32;
  QuantizedMatrix out;
  out.format = QuantFormat::kAffine;
  out.spec = QuantSpec{q4 ? 4 : 8, 32};
  out.ggml_type = q.ggml_type;
  out.rows = q.rows;
  out.cols = q.cols;
  out.packed = Tensor::empty({q.rows, q.cols * out.spec.bits / 32}, DType::kU32);
  out.scales = Tensor::empty({q.rows, blocks}, DType::kF16);
  const size_t in_row = static_cast<size_t>(q.packed.dim(1)), block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const size_t out_row = static_cast<size_t>(q.cols * out.spec.bits / 8);
  for (int64_t n = 0; n < q.rows; ++n) {
    const uint8_t* src = q.packed.data<uint8_t>() + static_cast<size_t>(n) * in_row;
    uint8_t* codes = reinterpret_cast<uint8_t*>(out.packed.data<uint32_t>()) + static_cast<size_t>(n) * out_row;
    uint16_t* scales = out.scales.data<uint16_t>() + n * blocks;
    for (int64_t b = 0; b < blocks; ++b, src += block_bytes) {
      std::memcpy(&scales[b], src, 2);  // d, f16
      const uint8_t* qs = src + 2;
      if (q4) {
        // ggml: element j < 16 in the low nibble of qs[j], j + 16 in its high nibble.
        // Affine: elements 2i and 2i + 1 in the low and high nibble of byte i.
        uint8_t e[32];
        for (int j = 0; j < 16; ++j) {
          e[j] = qs[j] & 0x0f;
          e[j + 16] = qs[j] >> 4;
        }
        for (int i = 0; i < 16; ++i) codes[b * 16 + i] = static_cast<uint8_t>(e[2 * i] | (e[2 * i + 1] << 4));
      } else {
        // Signed codes become unsigned around 128: d * q = d * ((q + 128) - 128).
        for (int j = 0; j < 32; ++j) codes[b * 32 + j] = static_cast<uint8_t>(qs[j] ^ 0x80);
      }
    }
  }
  return out;
}

}  // namespace hearth
