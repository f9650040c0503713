// The ops layer rejects mismatched shapes and dtypes with an InputError naming them, and the
// HEARTH_ISA knob picks the kernels' instruction set.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "base/error.h"
#include "base/knobs.h"
#include "core/context.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace hearth {
namespace {

// fn must throw InputError whose message contains every one of `parts`.
void expect_input_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError; expected one mentioning " << *parts.begin();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::kF32); }
Tensor i32(const Shape& s) { return Tensor::zeros(s, DType::kI32); }

TEST(ops_checks, MatmulShapes) {
  Context ctx;
  Tensor y = f32({4, 32});
  expect_input_error(
      [&] {
        ops::matmul(ctx, f32({4, 64}), f32({32, 8}), Tensor(), y);
      },
      {"matmul", "[4, 64]", "[32, 8]"});
  expect_input_error([&] { ops::matmul(ctx, f32({4, 64}), f32({64}), Tensor(), y); }, {"matmul", "[4, 64]", "[64]"});
  // Bias and output shapes.
  expect_input_error([&] { ops::matmul(ctx, f32({4, 64}), f32({32, 64}), f32({31}), y); }, {"bias", "[32]", "[31]"});
  Tensor y_bad = f32({4, 31});
  expect_input_error([&] { ops::matmul(ctx, f32({4, 64}), f32({32, 64}), Tensor(), y_bad); }, {"[4, 32]", "[4, 31]"});
}

TEST(ops_checks, MatmulDtypes) {
  Context ctx;
  Tensor y = f32({4, 32});
  expect_input_error(
      [&] {
        ops::matmul(ctx, Tensor::zeros({4, 64}, DType::kBF16), f32({32, 64}), Tensor(), y);
      },
      {"matmul", "f32", "bf16[4, 64]"});
  expect_input_error([&] { ops::matmul(ctx, f32({4, 64}), i32({32, 64}), Tensor(), y); }, {"matmul", "i32[32, 64]"});
  expect_input_error(
      [&] {
        ops::matmul(ctx, f32({4, 64}), f32({32, 64}), Tensor::zeros({32}, DType::kF16), y);
      },
      {"bias", "f16[32]"});
  Tensor y_half = Tensor::zeros({4, 32}, DType::kF16);
  expect_input_error([&] { ops::matmul(ctx, f32({4, 64}), f32({32, 64}), Tensor(), y_half); }, {"y", "f16[4, 32]"});
}

TEST(ops_checks, MatmulRunsWhenShapesFit) {
  Context ctx;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [2, 3]
  const std::vector<float> w = {1, 0, 0, 0, 1, 1};  // [2, 3]
  Tensor y = f32({2, 2});
  ops::matmul(ctx, Tensor::from_f32({2, 3}, x.data()), Tensor::from_f32({2, 3}, w.data()).to(DType::kBF16), Tensor(),
              y);
  EXPECT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_EQ(y.data<float>()[1], 5.0f);
  EXPECT_EQ(y.data<float>()[2], 4.0f);
  EXPECT_EQ(y.data<float>()[3], 11.0f);
}

TEST(ops_checks, NormMatmulGroupChecksAndIsTheNormThenTheMatmuls) {
  Context ctx;
  const std::vector<float> xv = {1, -2, 3, 0.5f, 4, 1, -1, 2}, gv = {1, 0.5f, 2, 1}, wv = {1, 2, 3, 4, -1, 0, 1, 2};
  const Tensor x = Tensor::from_f32({2, 4}, xv.data()), g = Tensor::from_f32({4}, gv.data());
  const Tensor w = Tensor::from_f32({2, 4}, wv.data()), none;
  Tensor y = f32({2, 2}), want = f32({2, 2}), normed = f32({2, 4});
  const ops::MatmulPart part{&w, &none, &y};
  ops::norm_matmul_group(ctx, x, g, 1e-6f, {&part, 1});
  ops::rms_norm(ctx, x, g, 1e-6f, normed);
  ops::matmul(ctx, normed, w, none, want);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want.data<float>()[i]) << i;
  expect_input_error(
      [&] {
        ops::norm_matmul_group(ctx, x, f32({3}), 1e-6f, {&part, 1});
      },
      {"norm_matmul_group", "[2, 4]", "[3]"});
  expect_input_error(
      [&] {
        ops::norm_matmul_group(ctx, x, i32({4}), 1e-6f, {&part, 1});
      },
      {"norm_matmul_group", "i32[4]"});
  Tensor y_bad = f32({2, 3});
  const ops::MatmulPart bad{&w, &none, &y_bad};
  expect_input_error([&] { ops::norm_matmul_group(ctx, x, g, 1e-6f, {&bad, 1}); }, {"[2, 2]", "[2, 3]"});
  Tensor square = f32({2, 2});
  const Tensor w2 = f32({2, 2});
  const ops::MatmulPart onto_x{&w2, &none, &square};
  expect_input_error(
      [&] {
        ops::norm_matmul_group(ctx, square, f32({2}), 1e-6f, {&onto_x, 1});
      },
      {"norm_matmul_group", "output is x"});
}

// silu_mul_matmul_group: silu_mul, then the group (gate is scratch); refused shapes and outputs.
TEST(ops_checks, SiluMulMatmulGroupIsSiluMulThenTheGroup) {
  Context ctx;
  const std::vector<float> gv = {1, -2, 3, 0.5f, 4, 1, -1, 2}, uv = {0.5f, 1, -1, 2, 1, 1, 3, -2};
  const std::vector<float> wv = {1, 2, 3, 4, -1, 0, 1, 2};
  Tensor gate = Tensor::from_f32({2, 4}, gv.data()), act = Tensor::from_f32({2, 4}, gv.data());
  const Tensor up = Tensor::from_f32({2, 4}, uv.data()), w = Tensor::from_f32({2, 4}, wv.data()), none;
  Tensor y = f32({2, 2}), want = f32({2, 2});
  const ops::MatmulPart part{&w, &none, &y};
  ops::silu_mul_matmul_group(ctx, gate, up, {&part, 1});
  ops::silu_mul(ctx, act, up, act);
  ops::matmul(ctx, act, w, none, want);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want.data<float>()[i]) << i;
  expect_input_error(
      [&] {
        ops::silu_mul_matmul_group(ctx, gate, f32({4, 2}), {&part, 1});
      },
      {"silu_mul_matmul_group", "[2, 4]", "[4, 2]"});
  Tensor y_bad = f32({2, 3});
  const ops::MatmulPart bad{&w, &none, &y_bad};
  expect_input_error([&] { ops::silu_mul_matmul_group(ctx, gate, up, {&bad, 1}); }, {"[2, 2]", "[2, 3]"});
  Tensor square = f32({2, 2});
  const Tensor w2 = f32({2, 2});
  const ops::MatmulPart onto_gate{&w2, &none, &square};
  expect_input_error(
      [&] {
        ops::silu_mul_matmul_group(ctx, square, f32({2, 2}), {&onto_gate, 1});
      },
      {"silu_mul_matmul_group", "output is gate"});
}

// gated_mlp: the norm group into gate and up, then down's part of silu(gate) * up adding to the
// residual (x itself); refused: gate or up accumulating, down of the wrong width.
TEST(ops_checks, GatedMlpIsTheNormGroupThenTheSiluGroup) {
  Context ctx;
  const std::vector<float> xv = {1, -2, 3, 0.5f, 4, 1, -1, 2}, gv = {0.5f, 1, -1, 2};
  const std::vector<float> wv = {1, 2, 3, 4, -1, 0, 1, 2, 0.5f, -1, 2, 1},
                           dv = {1, -1, 2, 0.5f, 0, 1, 3, -2, 1, 1, -1, 2};
  const Tensor g = Tensor::from_f32({4}, gv.data()), none;
  const Tensor gate_w = Tensor::from_f32({3, 4}, wv.data()), up_w = Tensor::from_f32({3, 4}, dv.data());
  const Tensor down_w = Tensor::from_f32({4, 3}, dv.data());
  Tensor x = Tensor::from_f32({2, 4}, xv.data()), want = Tensor::from_f32({2, 4}, xv.data());
  Tensor gate = f32({2, 3}), up = f32({2, 3});
  const std::array<ops::MatmulPart, 2> gate_up = {ops::MatmulPart{&gate_w, &none, &gate},
                                                  ops::MatmulPart{&up_w, &none, &up}};
  ops::gated_mlp(ctx, x, g, 1e-6f, gate_up, ops::MatmulPart{&down_w, &none, &x, nullptr, true});
  Tensor gate2 = f32({2, 3}), up2 = f32({2, 3});
  const std::array<ops::MatmulPart, 2> gate_up2 = {ops::MatmulPart{&gate_w, &none, &gate2},
                                                   ops::MatmulPart{&up_w, &none, &up2}};
  const ops::MatmulPart down2{&down_w, &none, &want, nullptr, true};
  ops::norm_matmul_group(ctx, want, g, 1e-6f, gate_up2);
  ops::silu_mul_matmul_group(ctx, gate2, up2, {&down2, 1});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.data<float>()[i], want.data<float>()[i]) << i;
  const std::array<ops::MatmulPart, 2> accumulating = {ops::MatmulPart{&gate_w, &none, &gate, nullptr, true},
                                                       ops::MatmulPart{&up_w, &none, &up}};
  expect_input_error(
      [&] {
        ops::gated_mlp(ctx, x, g, 1e-6f, accumulating, ops::MatmulPart{&down_w, &none, &x, nullptr, true});
      },
      {"gated_mlp", "accumulates"});
  const Tensor narrow_down = f32({4, 2});
  expect_input_error(
      [&] {
        ops::gated_mlp(ctx, x, g, 1e-6f, gate_up, ops::MatmulPart{&narrow_down, &none, &x, nullptr, true});
      },
      {"matmul", "[2, 3] x [4, 2]"});
}

TEST(ops_checks, ElementwiseAndNormShapes) {
  Context ctx;
  Tensor a = f32({3, 8});
  expect_input_error([&] { ops::add(ctx, a, f32({3, 7})); }, {"add", "[3, 8]", "[3, 7]"});
  expect_input_error([&] { ops::add(ctx, a, Tensor::zeros({3, 8}, DType::kBF16)); }, {"add", "bf16[3, 8]"});
  Tensor out = f32({3, 8});
  expect_input_error([&] { ops::silu_mul(ctx, a, f32({8, 3}), out); }, {"silu_mul", "[3, 8]", "[8, 3]"});
  Tensor y = f32({3, 8});
  expect_input_error([&] { ops::rms_norm(ctx, a, f32({7}), 1e-5f, y); }, {"rms_norm", "[3, 8]", "[7]"});
  Tensor y_bad = f32({3, 9});
  expect_input_error([&] { ops::rms_norm(ctx, a, f32({8}), 1e-5f, y_bad); }, {"rms_norm", "[3, 9]"});
  Tensor logits = f32({2, 10});
  Tensor ids = i32({3});
  expect_input_error([&] { ops::argmax(ctx, logits, ids); }, {"argmax", "[2, 10]"});
  Tensor ids_f = f32({2});
  expect_input_error([&] { ops::argmax(ctx, logits, ids_f); }, {"argmax", "i32", "f32[2]"});
  Tensor flat = f32({10});
  expect_input_error([&] { ops::softmax(ctx, flat); }, {"softmax", "[10]"});
}

TEST(ops_checks, EmbeddingAndRopeShapes) {
  Context ctx;
  Tensor out = f32({3, 16});
  expect_input_error([&] { ops::embedding(ctx, f32({100, 16}), f32({3}), out); }, {"embedding", "i32", "f32[3]"});
  expect_input_error([&] { ops::embedding(ctx, f32({100, 16}), i32({4}), out); }, {"embedding", "[4, 16]", "[3, 16]"});
  expect_input_error([&] { ops::embedding(ctx, i32({100, 16}), i32({3}), out); }, {"embedding", "i32[100, 16]"});
  Tensor x = f32({3, 2, 8});
  expect_input_error([&] { ops::rope(ctx, x, i32({2}), f32({4}), 1.0f); }, {"rope", "[2]", "[3, 2, 8]"});
  expect_input_error([&] { ops::rope(ctx, x, i32({3}), f32({5}), 1.0f); }, {"rope", "10", "[3, 2, 8]"});
  Tensor x2 = f32({3, 16});
  expect_input_error([&] { ops::rope(ctx, x2, i32({3}), f32({4}), 1.0f); }, {"rope", "rank 3", "[3, 16]"});
}

TEST(ops_checks, KvWriteAndAttentionShapes) {
  Context ctx;
  ops::KvLayer cache{f32({4, 16, 2, 8}), f32({4, 16, 2, 8})};
  expect_input_error(
      [&] {
        ops::kv_write(ctx, f32({3, 2, 8}), f32({3, 2, 8}), i32({2}), cache);
      },
      {"kv_write", "i32[2]", "[4, 16, 2, 8]"});
  expect_input_error(
      [&] {
        ops::kv_write(ctx, f32({3, 4, 8}), f32({3, 4, 8}), i32({3}), cache);
      },
      {"kv_write", "[3, 4, 8]", "[4, 16, 2, 8]"});
  const int32_t starts[] = {0, 3}, ctx_lens[] = {0}, table[] = {0};
  ops::AttentionBatch batch{Tensor::from_i32({2}, starts), Tensor::from_i32({1}, ctx_lens),
                            Tensor::from_i32({1, 1}, table)};
  Tensor out = f32({3, 3, 8});
  expect_input_error(
      [&] {
        ops::attention(ctx, f32({3, 3, 8}), cache, batch, 1.0f, 0, out);
      },
      {"attention", "[3, 3, 8]", "[4, 16, 2, 8]"});
  // K and V caches of different types (or of a non-float type) are refused.
  ops::KvLayer mixed{f32({4, 16, 2, 8}), Tensor::zeros({4, 16, 2, 8}, DType::kF16)};
  expect_input_error(
      [&] {
        ops::kv_write(ctx, f32({3, 2, 8}), f32({3, 2, 8}), i32({3}), mixed);
      },
      {"kv_write", "one float type", "f16[4, 16, 2, 8]"});
  ops::KvLayer ints{i32({4, 16, 2, 8}), i32({4, 16, 2, 8})};
  expect_input_error(
      [&] {
        ops::attention(ctx, f32({3, 2, 8}), ints, batch, 1.0f, 0, out);
      },
      {"attention", "one float type", "i32[4, 16, 2, 8]"});
  Tensor out_bad = f32({3, 4, 8});
  expect_input_error(
      [&] {
        ops::attention(ctx, f32({3, 2, 8}), cache, batch, 1.0f, 0, out_bad);
      },
      {"attention", "[3, 2, 8]", "[3, 4, 8]"});
}

// attention_project: the attention into out, then the projection's matmul of out as [T, Hq * Dh]
// adding to the residual; refused: a projection of the wrong width, one that writes out.
TEST(ops_checks, AttentionProjectIsTheAttentionThenTheProjection) {
  Context ctx;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  auto random = [&](const Shape& shape) {
    Tensor t = f32(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
    return t;
  };
  const ops::KvLayer cache{random({2, 16, 2, 8}), random({2, 16, 2, 8})};
  const int32_t starts[] = {0, 2}, ctx_lens[] = {5}, table[] = {1, 0};
  const ops::AttentionBatch batch{Tensor::from_i32({2}, starts), Tensor::from_i32({1}, ctx_lens),
                                  Tensor::from_i32({1, 2}, table)};
  const Tensor q = random({2, 4, 8}), w = random({6, 32}), bias = random({6}), residual = random({2, 6});
  Tensor out = f32({2, 4, 8}), out2 = f32({2, 4, 8});
  Tensor y = Tensor::from_f32({2, 6}, residual.data<float>()), want = Tensor::from_f32({2, 6}, residual.data<float>());
  ops::attention_project(ctx, q, cache, batch, 0.3f, 0, out, ops::MatmulPart{&w, &bias, &y, nullptr, true});
  ops::attention(ctx, q, cache, batch, 0.3f, 0, out2);
  const ops::MatmulPart project{&w, &bias, &want, nullptr, true};
  ops::matmul_group(ctx, out2.reshape({2, 32}), {&project, 1});
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], out2.data<float>()[i]) << i;
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data<float>()[i], want.data<float>()[i]) << i;
  const Tensor narrow = f32({6, 16});
  expect_input_error(
      [&] {
        ops::attention_project(ctx, q, cache, batch, 0.3f, 0, out, ops::MatmulPart{&narrow, &bias, &y});
      },
      {"matmul", "[2, 32] x [6, 16]"});
  const Tensor square = f32({32, 32}), no_bias;
  Tensor flat = out.reshape({2, 32});
  expect_input_error(
      [&] {
        ops::attention_project(ctx, q, cache, batch, 0.3f, 0, out, ops::MatmulPart{&square, &no_bias, &flat});
      },
      {"attention_project", "writes the attention's output"});
}

TEST(ops_checks, IsaKnob) {
  {
    KnobOverride o("HEARTH_ISA", "scalar");
    EXPECT_EQ(cpu::active_isa(), cpu::Isa::kScalar);
  }
  {
    KnobOverride o("HEARTH_ISA", "auto");
    EXPECT_EQ(cpu::active_isa(), cpu::best_isa());
  }
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    KnobOverride o("HEARTH_ISA", std::string(cpu::isa_name(isa)));
    if (cpu::isa_supported(isa)) {
      EXPECT_EQ(cpu::active_isa(), isa);
    } else {
      EXPECT_THROW(cpu::active_isa(), InputError) << cpu::isa_name(isa);
    }
  }
  {
    KnobOverride o("HEARTH_ISA", "avx9000");
    expect_input_error([] { cpu::active_isa(); }, {"HEARTH_ISA", "avx9000"});
  }
}

// The knob reaches the kernels through the ops layer: scalar and the best ISA agree.
TEST(ops_checks, IsaKnobDrivesOps) {
  Context ctx;
  std::vector<float> xs(5 * 37), ws(9 * 37);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(int(i % 11) - 5) / 8.0f;
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = float(int(i % 7) - 3) / 4.0f;
  const Tensor x = Tensor::from_f32({5, 37}, xs.data()), w = Tensor::from_f32({9, 37}, ws.data());
  Tensor y_scalar = f32({5, 9}), y_best = f32({5, 9});
  {
    KnobOverride o("HEARTH_ISA", "scalar");
    ops::matmul(ctx, x, w, Tensor(), y_scalar);
  }
  {
    KnobOverride o("HEARTH_ISA", "auto");
    ops::matmul(ctx, x, w, Tensor(), y_best);
  }
  // Products of multiples of 1/32 sum exactly in any order.
  for (int64_t i = 0; i < y_scalar.numel(); ++i) EXPECT_EQ(y_scalar.data<float>()[i], y_best.data<float>()[i]) << i;
}

}  // namespace
}  // namespace hearth
