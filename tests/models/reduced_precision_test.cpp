// bf16- and f16-stored weights load (zero-copy) and run; their logits stay close to the f32
// model's; so do the f32 model's with an f16 or bf16 KV cache. Tolerances are documented in
// docs/numerics.md.
#include <gtest/gtest.h>

#include <filesystem>

#include "model_runs.h"
#include "models/dense_decoder.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace hearth {
namespace {

using testing::prefill_logits;

namespace fs = std::filesystem;

struct Tolerance {
  DType dtype;
  double max_mean_kl;         // mean KL(f32 || reduced) per position
  double max_rel_logit_diff;  // max |Δlogit| / max|logit|
};

void PrintTo(const Tolerance& t, std::ostream* os) { *os << dtype_name(t.dtype); }

// Writes DIR's weights converted to `dtype` into `out` with the same config files.
void convert_model(const std::string& dir, DType dtype, const std::string& out) {
  auto src = SafetensorsFile::open(dir + "/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SafetensorsEntry& e : src->header().tensors) tensors.emplace_back(e.name, src->tensor(e).to(dtype));
  write_safetensors(out + "/model.safetensors", tensors);
  for (const char* f : {"config.json", "generation_config.json"}) fs::copy_file(dir + "/" + f, out + "/" + f);
}

class ReducedPrecision : public ::testing::TestWithParam<std::tuple<std::string, Tolerance>> {};

TEST_P(ReducedPrecision, StoredWeightsRunCloseToF32) {
  const auto& [name, tol] = GetParam();
  const std::string dir = testing::data_path("parity/" + name);
  const auto tokens = testing::read_ids(dir + "/reference.safetensors", "tokens");
  const Tensor f32 = prefill_logits(*load_model(dir), tokens);

  testing::TempDir tmp;
  convert_model(dir, tol.dtype, tmp.path());
  auto reduced = load_model(tmp.path());
  // The converted file is loaded in place: its matrices are views of the mapped file.
  EXPECT_EQ(reduced->info().weight_bytes * 2, load_model(dir)->info().weight_bytes);
  const Tensor& q = dynamic_cast<const DenseDecoder&>(*reduced).attention(0).q.weight;
  EXPECT_EQ(q.dtype(), tol.dtype);
  EXPECT_TRUE(q.is_view_of_external());
  const Tensor got = prefill_logits(*reduced, tokens);
  const double kl = testing::mean_kl(f32, got);
  const double rel = testing::max_abs_diff(got, f32) / testing::max_abs(f32);
  EXPECT_LE(kl, tol.max_mean_kl) << dtype_name(tol.dtype);
  EXPECT_LE(rel, tol.max_rel_logit_diff) << dtype_name(tol.dtype);
  std::printf("%s %s: mean KL %.3g, max rel logit diff %.3g\n", name.c_str(),
              std::string(dtype_name(tol.dtype)).c_str(), kl, rel);

  // Converting the matrices at load time (--dtype) stays within the same bounds (norms and
  // biases stay f32 there, so it is not bit-identical to the converted file).
  const Tensor converted = prefill_logits(*load_model(dir, LoadOptions{.weight_dtype = tol.dtype}), tokens);
  EXPECT_LE(testing::mean_kl(f32, converted), tol.max_mean_kl);
  EXPECT_LE(testing::max_abs_diff(converted, f32) / testing::max_abs(f32), tol.max_rel_logit_diff);
}

// See docs/numerics.md: bf16 keeps 8 mantissa bits, f16 11.
const Tolerance kBf16{DType::kBF16, 2e-4, 4e-2};
const Tolerance kF16{DType::kF16, 5e-6, 1e-2};

// The f32 model with its KV cache in f16 or bf16 (--kv-dtype): the rounding of K and V
// alone. f32 weights default to an f32 cache; every other model defaults to f16.
class ReducedPrecisionKv : public ::testing::TestWithParam<std::tuple<std::string, Tolerance>> {};

TEST_P(ReducedPrecisionKv, KvCacheRunsCloseToF32) {
  const auto& [name, tol] = GetParam();
  const std::string dir = testing::data_path("parity/" + name);
  const auto tokens = testing::read_ids(dir + "/reference.safetensors", "tokens");
  auto model = load_model(dir);
  EXPECT_EQ(model->default_kv_dtype(), DType::kF32);
  const Tensor f32 = prefill_logits(*model, tokens);
  const Tensor got = prefill_logits(*model, tokens, tol.dtype);
  const double kl = testing::mean_kl(f32, got);
  const double rel = testing::max_abs_diff(got, f32) / testing::max_abs(f32);
  EXPECT_GT(rel, 0.0) << "the cache's rounding left the logits unchanged: was it " << dtype_name(tol.dtype) << "?";
  EXPECT_LE(kl, tol.max_mean_kl) << dtype_name(tol.dtype);
  EXPECT_LE(rel, tol.max_rel_logit_diff) << dtype_name(tol.dtype);
  std::printf("%s KV %s: mean KL %.3g, max rel logit diff %.3g\n", name.c_str(),
              std::string(dtype_name(tol.dtype)).c_str(), kl, rel);
}

// See docs/numerics.md.
const Tolerance kKvBf16{DType::kBF16, 1.5e-5, 2e-2};
const Tolerance kKvF16{DType::kF16, 3e-7, 3e-3};

INSTANTIATE_TEST_SUITE_P(Fixtures, ReducedPrecisionKv,
                         ::testing::Combine(::testing::ValuesIn(testing::parity_fixtures()),
                                            ::testing::Values(kKvBf16, kKvF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param).dtype));
                         });

INSTANTIATE_TEST_SUITE_P(Fixtures, ReducedPrecision,
                         ::testing::Combine(::testing::ValuesIn(testing::parity_fixtures()),
                                            ::testing::Values(kBf16, kF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param).dtype));
                         });

}  // namespace
}  // namespace hearth
