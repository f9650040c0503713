// Every parity fixture (tests/data/parity, transformers f32 references) run on the CUDA backend:
// prefill logits within the CPU's bound of the reference and close to the CPU's own, decode
// token by token agreeing with prefill, and the same greedy continuation as transformers.
// Skips when no CUDA device is present. Tolerances are in docs/numerics.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "base/knobs.h"
#include "base/thread_pool.h"
#include "core/device_memory.h"
#include "core/dtype.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace hearth {
namespace {

constexpr Device kGpu{DeviceType::kCuda, 0};

struct Fixture {
  std::string dir;
  std::vector<int32_t> tokens, greedy;
  Tensor ref_logits;  // [T, V]
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.dir = testing::data_path("parity/" + name);
  const std::string ref = f.dir + "/reference.safetensors";
  f.tokens = testing::read_ids(ref, "tokens");
  f.greedy = testing::read_ids(ref, "greedy");
  f.ref_logits = testing::read_tensor(ref, "logits");
  return f;
}

// Logits [T, V] of every position, the sequence fed `chunk` tokens at a time.
Tensor run_chunked(const Model& m, Context ctx, const std::vector<int32_t>& tokens, int64_t chunk, int64_t block_size) {
  Engine engine(m, ctx, EngineOptions{.block_size = block_size, .kv_tokens = 256});
  Sequence s;
  s.tokens = tokens;
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.info().vocab_size;
  Tensor out = Tensor::empty({T, V}, DType::kF32);
  for (int64_t done = 0; done < T;) {
    const int64_t n = std::min(chunk, T - done);
    const Tensor l = engine.step({{&s, n, true}});
    EXPECT_EQ(l.device(), kCpu);
    std::copy(l.data<float>(), l.data<float>() + l.numel(), out.data<float>() + done * V);
    done += n;
  }
  return out;
}

class CudaParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaParity, LogitsMatchTransformersAndTheCpu) {
  const Fixture f = load_fixture(GetParam());
  auto gpu = load_model(f.dir, LoadOptions{.device = kGpu});
  auto cpu = load_model(f.dir);
  ThreadPool pool(2);
  const Tensor on_cpu = run_chunked(*cpu, Context{&pool, kCpu}, f.tokens, 1 << 20, 16);
  const float range = testing::max_abs(f.ref_logits);
  // One prefill (cuBLAS for the matrices), then decode-sized steps (the matvec kernel).
  for (int64_t chunk : {int64_t{1} << 20, int64_t{1}, int64_t{7}}) {
    const Tensor got = run_chunked(*gpu, Context{nullptr, kGpu}, f.tokens, chunk, chunk == 7 ? 4 : 16);
    int64_t where = 0;
    EXPECT_LE(testing::max_abs_diff(got, f.ref_logits, &where), 1e-4f * range)
        << "chunk " << chunk << ": worst logit " << where << " vs transformers";
    EXPECT_LE(testing::max_abs_diff(got, on_cpu), 1e-5f * range) << "chunk " << chunk << " vs the CPU";
  }
}

TEST_P(CudaParity, GreedyContinuationMatchesTransformers) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir, LoadOptions{.device = kGpu});
  Engine engine(*m, Context{nullptr, kGpu});
  GenerationRequest req;
  req.prompt = f.tokens;
  req.max_tokens = static_cast<int64_t>(f.greedy.size());
  req.ignore_eos = true;
  req.prefill_chunk = 11;
  GenerationStream stream(engine, req);
  std::vector<int32_t> got;
  while (auto ev = stream.next()) got.push_back(ev->token);
  EXPECT_EQ(got, f.greedy);
}

// The fixture's matrices in bf16 on the GPU (prefill on tensor cores with x rounded to bf16,
// decode steps, chunks of 7; an f16 KV cache) against the f32 model on the CPU: within the CPU's
// own bf16 bounds on the KL (2e-4) and, with room for the rounding of x, 5e-2 of the range.
TEST_P(CudaParity, Bf16WeightsRunCloseToTheCpuF32) {
  const Fixture f = load_fixture(GetParam());
  ThreadPool pool(2);
  const Tensor f32 = run_chunked(*load_model(f.dir), Context{&pool, kCpu}, f.tokens, 1 << 20, 16);
  auto gpu = load_model(f.dir, LoadOptions{.weight_dtype = DType::kBF16, .device = kGpu});
  const float range = testing::max_abs(f32);
  for (int64_t chunk : {int64_t{1} << 20, int64_t{1}, int64_t{7}}) {
    const Tensor got = run_chunked(*gpu, Context{nullptr, kGpu}, f.tokens, chunk, 16);
    const double kl = testing::mean_kl(f32, got), rel = testing::max_abs_diff(got, f32) / range;
    EXPECT_LE(kl, 2e-4) << "chunk " << chunk;
    EXPECT_LE(rel, 5e-2) << "chunk " << chunk;
    std::printf("%s bf16 on the GPU against the CPU's f32, chunk %lld: mean KL %.3g, max rel %.3g\n",
                GetParam().c_str(), static_cast<long long>(chunk), kl, rel);
  }
}

// The fixture converted to MLX affine 4 and 8 bits (`hearth convert -q`, groups of 32), on the
// GPU against the same quantized model on the CPU:
// - decode steps take integer dots with x rounded to int8 per group, as the CPU's VNNI kernels
//   do (each matvec checked against that bound in cuda_ops_test): within a mean KL of 2e-3 of
//   the scalar kernels, which dequantize each weight and take f32 dots (the tiny random
//   fixtures' logits are steep: 1.9e-4 to 8.8e-4 measured, where 4 bits cost 4e-2 against f32);
// - one prefill (the matrices dequantized to bf16, x rounded to bf16, tensor cores) within a
//   mean KL of 1e-4 and 3e-2 of the range of the scalar kernels;
// - decode steps against the f32 model on the CPU: within the CPU's own bounds for the format
//   (5e-2 for 4 bits, 1e-3 for 8), widened for the GPU's rounding of x (7e-2 and 3e-3).
TEST_P(CudaParity, QuantizedModelsMatchTheCpuReference) {
  const Fixture f = load_fixture(GetParam());
  const Tensor f32 = run_chunked(*load_model(f.dir), Context{nullptr, kCpu}, f.tokens, 1 << 20, 16);
  for (int bits : {4, 8}) {
    testing::TempDir tmp;
    int status = 0;
    std::string err;
    testing::run_hearth("convert " + f.dir + " -q --q-bits " + std::to_string(bits) + " --q-group-size 32 --mlx-path " +
                            tmp.path() + "/q",
                        &status, &err);
    ASSERT_EQ(status, 0) << err;
    auto gpu = load_model(tmp.path() + "/q", LoadOptions{.device = kGpu});
    Tensor on_cpu;
    {
      const KnobOverride isa("HEARTH_ISA", "scalar");
      auto cpu = load_model(tmp.path() + "/q");
      on_cpu = run_chunked(*cpu, Context{nullptr, kCpu}, f.tokens, 1 << 20, 16);
    }
    const float range = testing::max_abs(on_cpu);
    const Tensor stepped = run_chunked(*gpu, Context{nullptr, kGpu}, f.tokens, 1, 16);
    const double stepped_kl = testing::mean_kl(on_cpu, stepped);
    EXPECT_LE(stepped_kl, 2e-3) << bits << "-bit, token by token";
    const double f32_kl = testing::mean_kl(f32, stepped);
    EXPECT_LE(f32_kl, bits == 4 ? 7e-2 : 3e-3) << bits << "-bit, token by token, against f32";
    const Tensor whole = run_chunked(*gpu, Context{nullptr, kGpu}, f.tokens, 1 << 20, 16);
    const double kl = testing::mean_kl(on_cpu, whole), rel = testing::max_abs_diff(whole, on_cpu) / range;
    EXPECT_LE(kl, 1e-4) << bits << "-bit, one prefill";
    EXPECT_LE(rel, 3e-2) << bits << "-bit, one prefill";
    std::printf(
        "%s %d-bit on the GPU against the scalar CPU: token by token mean KL %.3g; one prefill mean KL %.3g, "
        "max rel %.3g; token by token against the CPU's f32 model: mean KL %.3g\n",
        GetParam().c_str(), bits, stepped_kl, kl, rel, f32_kl);
  }
}

// GGUF files written by llama.cpp itself (tests/data/gguf_llamacpp: its converter's F16 and Q8_0,
// its quantizer's Q4_K_M mix of Q4_K and Q6_K) on the GPU: token by token and in one prefill,
// within the quantized models' bounds of the same file on the CPU's scalar kernels.
TEST(CudaGguf, LlamaCppFilesMatchTheCpuReference) {
  if (device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> parity_tokens =
      testing::read_ids(testing::data_path("parity/qwen3/reference.safetensors"), "tokens");
  std::vector<int32_t> other_tokens;
  for (int32_t i = 0; i < 40; ++i) other_tokens.push_back((i * 37 + 11) % 997);
  for (const char* name : {"qwen3-q8_0", "llama_bias_linear-q8_0", "qwen2_yarn-f16", "tiny_256-q4_k_m"}) {
    const std::string path = testing::data_path(std::string("gguf_llamacpp/") + name + ".gguf");
    const std::vector<int32_t>& tokens = std::string(name).starts_with("tiny_256") ? other_tokens : parity_tokens;
    Tensor on_cpu;
    {
      const KnobOverride isa("HEARTH_ISA", "scalar");
      on_cpu = run_chunked(*load_model(path), Context{nullptr, kCpu}, tokens, 1 << 20, 16);
    }
    auto gpu = load_model(path, LoadOptions{.device = kGpu});
    const Tensor stepped = run_chunked(*gpu, Context{nullptr, kGpu}, tokens, 1, 16);
    const Tensor whole = run_chunked(*gpu, Context{nullptr, kGpu}, tokens, 1 << 20, 16);
    const double stepped_kl = testing::mean_kl(on_cpu, stepped), kl = testing::mean_kl(on_cpu, whole);
    const double rel = testing::max_abs_diff(whole, on_cpu) / testing::max_abs(on_cpu);
    EXPECT_LE(stepped_kl, 2e-3) << name << ", token by token";
    EXPECT_LE(kl, 1e-4) << name << ", one prefill";
    EXPECT_LE(rel, 3e-2) << name << ", one prefill";
    std::printf(
        "%s on the GPU against the scalar CPU: token by token mean KL %.3g; one prefill mean KL %.3g, max rel %.3g\n",
        name, stepped_kl, kl, rel);
  }
}

// Every logit of a schedule of steps: three prompts prefilled, then decode steps of changing
// sets of sequences (sizes 1 to 3, each size recorded once and replayed after), the next token
// of each the argmax of its logits.
std::vector<float> run_schedule(const Model& m, const Fixture& f, int64_t* replays) {
  Engine engine(m, Context{nullptr, kGpu}, EngineOptions{.block_size = 4, .kv_tokens = 512});
  std::vector<Sequence> seqs(3);
  std::vector<float> all;
  const int64_t V = m.info().vocab_size;
  auto take = [&](const Tensor& logits, const std::vector<size_t>& which) {
    EXPECT_EQ(logits.dim(0), static_cast<int64_t>(which.size()));
    all.insert(all.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    for (size_t r = 0; r < which.size(); ++r) {
      const float* row = logits.data<float>() + static_cast<int64_t>(r) * V;
      seqs[which[r]].tokens.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    }
  };
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens.assign(f.tokens.begin(), f.tokens.begin() + static_cast<std::ptrdiff_t>(f.tokens.size() - 2 * i));
    take(engine.step({{&seqs[i], static_cast<int64_t>(seqs[i].tokens.size())}}), {i});
  }
  const std::vector<std::vector<size_t>> schedule = {{0},    {0, 1}, {0, 1, 2}, {2},    {1, 2}, {0, 1, 2}, {0},
                                                     {2, 0}, {1},    {0, 1, 2}, {0, 2}, {1},    {0, 1, 2}};
  for (const auto& which : schedule) {
    std::vector<Engine::Work> work;
    for (size_t i : which) work.push_back({&seqs[i], 1});
    take(engine.step(work), which);
  }
  *replays = engine.graph_replays();
  return all;
}

// Decode steps replayed from recorded graphs give the very logits of the same steps launched
// kernel by kernel (the same kernels on the same values; only the block tables' stride differs).
TEST_P(CudaParity, GraphReplaysMatchKernelByKernelSteps) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir, LoadOptions{.device = kGpu});
  int64_t replays = 0, eager_replays = 0;
  const std::vector<float> graphed = run_schedule(*m, f, &replays);
  std::vector<float> eager;
  {
    const KnobOverride off("HEARTH_DEVICE_GRAPHS", "0");
    eager = run_schedule(*m, f, &eager_replays);
  }
  EXPECT_EQ(eager_replays, 0);
  EXPECT_EQ(replays, 13 - 3);  // the first step of each size runs eagerly and records
  ASSERT_EQ(graphed.size(), eager.size());
  for (size_t i = 0; i < graphed.size(); ++i) ASSERT_EQ(graphed[i], eager[i]) << "logit " << i;
}

// Tokens drawn on the GPU (ops::sample, in the replayed graphs) are the host Sampler's draws from
// the same logits with the same seed; a generation with temperature is the same twice.
TEST_P(CudaParity, DeviceSamplingDrawsTheHostSamplersTokens) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir, LoadOptions{.device = kGpu});
  for (const SamplingParams& p : {SamplingParams{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 3},
                                  SamplingParams{.temperature = 1.5f, .min_p = 0.02f, .seed = 4},
                                  SamplingParams{.temperature = 1.0f, .seed = 5}}) {
    Sampler host(p), device(p);
    Engine a(*m, Context{nullptr, kGpu}), b(*m, Context{nullptr, kGpu});
    Sequence sa, sb;
    sa.tokens = sb.tokens = f.tokens;
    for (int step = 0; step < 12; ++step) {
      const int64_t n = step == 0 ? static_cast<int64_t>(f.tokens.size()) : 1;
      const Tensor logits = a.step({{&sa, n}});
      const int32_t want = host.sample(logits.data<float>(), logits.dim(1));
      const SampleRow row = device.device_row();
      const int32_t got = b.step_sample({{&sb, n}}, {&row, 1}).at(0);
      ASSERT_EQ(got, want) << "temperature " << p.temperature << ", step " << step;
      sa.tokens.push_back(want);
      sb.tokens.push_back(got);
    }
    EXPECT_EQ(b.graph_replays(), 12 - 2);
  }
  auto generate = [&] {
    Engine engine(*m, Context{nullptr, kGpu});
    GenerationRequest req;
    req.prompt = f.tokens;
    req.max_tokens = 16;
    req.ignore_eos = true;
    req.sampling = SamplingParams{.temperature = 1.0f, .top_p = 0.9f, .seed = 9};
    GenerationStream stream(engine, req);
    std::vector<int32_t> out;
    while (auto ev = stream.next()) out.push_back(ev->token);
    return out;
  };
  const std::vector<int32_t> first = generate();
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(generate(), first);
}

// Logit processors and logprobs on the GPU (ops::edit_logits, ops::logprobs, in steps that still
// replay graphs): the host Sampler's tokens from the same logits, its top logprobs' ids, and its
// logprobs within the rounding of the exps.
TEST_P(CudaParity, DeviceProcessorsAndLogprobsMatchTheHostSampler) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir, LoadOptions{.device = kGpu});
  const int64_t vocab = m->info().vocab_size;
  const size_t n_prompt = f.tokens.size();
  for (const SamplingParams& p :
       {SamplingParams{.repetition_penalty = 1.3f, .logit_bias = {{5, 3.0f}, {0, -100.0f}}},
        SamplingParams{
            .temperature = 0.8f, .top_k = 40, .presence_penalty = 0.7f, .frequency_penalty = 0.4f, .seed = 6}}) {
    Sampler host(p), device(p);
    Engine a(*m, Context{nullptr, kGpu}), b(*m, Context{nullptr, kGpu});
    Sequence sa, sb;
    sa.tokens = sb.tokens = f.tokens;
    for (int step = 0; step < 12; ++step) {
      const int64_t n = step == 0 ? static_cast<int64_t>(n_prompt) : 1;
      const Tensor logits = a.step({{&sa, n}});
      TokenLogprobs want;
      const int32_t token = host.sample(logits.data<float>(), logits.dim(1), sa.tokens, n_prompt, &want, 5);
      const SampleRow row = device.device_row();
      const Engine::Drawn got = b.step_draw({{&sb, n}}, {{&row, 1}, device.edits(vocab, sb.tokens, n_prompt), 5});
      ASSERT_EQ(got.ids.at(0), token) << "temperature " << p.temperature << ", step " << step;
      const TokenLogprobs& lp = got.logprobs.at(0);
      EXPECT_NEAR(lp.logprob, want.logprob, 1e-5);
      ASSERT_EQ(lp.top.size(), want.top.size());
      for (size_t j = 0; j < lp.top.size(); ++j) {
        EXPECT_EQ(lp.top[j].first, want.top[j].first) << "step " << step << ", place " << j;
        EXPECT_NEAR(lp.top[j].second, want.top[j].second, 1e-5);
      }
      sa.tokens.push_back(token);
      sb.tokens.push_back(got.ids[0]);
    }
    EXPECT_EQ(b.graph_replays(), 12 - 2);
    // A generation with the same parameters draws the same tokens, each with its logprobs.
    Engine engine(*m, Context{nullptr, kGpu});
    GenerationRequest req;
    req.prompt = f.tokens;
    req.max_tokens = 12;
    req.ignore_eos = true;
    req.sampling = p;
    req.top_logprobs = 3;
    GenerationStream stream(engine, req);
    std::vector<int32_t> generated;
    while (auto ev = stream.next()) {
      generated.push_back(ev->token);
      ASSERT_TRUE(ev->logprobs.has_value());
      EXPECT_EQ(ev->logprobs->top.size(), 3u);
    }
    EXPECT_EQ(generated,
              std::vector<int32_t>(sa.tokens.begin() + static_cast<std::ptrdiff_t>(n_prompt), sa.tokens.end()));
  }
}

// A bad token id in a replayed step fails that step with the kernel's report, and the next
// step replays cleanly.
TEST_P(CudaParity, GraphReplayReportsABadTokenOnce) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir, LoadOptions{.device = kGpu});
  Engine engine(*m, Context{nullptr, kGpu});
  Sequence s;
  s.tokens = f.tokens;
  engine.step({{&s, static_cast<int64_t>(s.tokens.size())}});
  for (int i = 0; i < 2; ++i) {  // records, then replays
    s.tokens.push_back(f.greedy[static_cast<size_t>(i)]);
    engine.step({{&s, 1}});
  }
  ASSERT_EQ(engine.graph_replays(), 1);
  s.tokens.push_back(static_cast<int32_t>(m->info().vocab_size));
  EXPECT_THROW(engine.step({{&s, 1}}), InputError);
  s.tokens.back() = f.greedy[2];
  const Tensor logits = engine.step({{&s, 1}});
  EXPECT_EQ(engine.graph_replays(), 3);
  const int64_t V = m->info().vocab_size;
  EXPECT_EQ(std::max_element(logits.data<float>(), logits.data<float>() + V) - logits.data<float>(), f.greedy[3]);
}

// A random Llama of 2 layers wide enough for the tensor-core decode matvecs (K = 512 and 1536, a
// multiple of their chunks), in bf16 (so that its quantized form has the bf16 scales and biases
// those kernels take, as mlx-community's models do; f32 ones go to the dp4a kernels): every matrix with a spread near
// 1/sqrt(K) so activations stay near 1, the LM head wider so the logits are steep (the KL bound means something).
void write_wide_llama(const std::string& dir) {
  constexpr int64_t kVocab = 256, kHidden = 512, kInter = 1536, kHeads = 4, kKvHeads = 2, kHeadDim = 128;
  std::mt19937 rng(21);
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto add = [&](const std::string& name, Shape shape, float mean, float sd) {
    Tensor t = Tensor::empty(shape, DType::kBF16);
    std::normal_distribution<float> dist(mean, sd);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(dist(rng));
    tensors.emplace_back(name, t);
  };
  add("model.embed_tokens.weight", {kVocab, kHidden}, 0.0f, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    add(p + ".input_layernorm.weight", {kHidden}, 1.0f, 0.05f);
    add(p + ".post_attention_layernorm.weight", {kHidden}, 1.0f, 0.05f);
    add(p + ".self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}, 0.0f, 0.044f);
    add(p + ".self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0.0f, 0.044f);
    add(p + ".self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0.0f, 0.044f);
    add(p + ".self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}, 0.0f, 0.044f);
    add(p + ".mlp.gate_proj.weight", {kInter, kHidden}, 0.0f, 0.044f);
    add(p + ".mlp.up_proj.weight", {kInter, kHidden}, 0.0f, 0.044f);
    add(p + ".mlp.down_proj.weight", {kHidden, kInter}, 0.0f, 0.026f);
  }
  add("model.norm.weight", {kHidden}, 1.0f, 0.05f);
  add("lm_head.weight", {kVocab, kHidden}, 0.0f, 0.15f);
  write_safetensors(dir + "/model.safetensors", tensors);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 512, "intermediate_size": 1536,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 4096,
  "tie_word_embeddings": false, "eos_token_id": 2})";
}

// The wide Llama quantized to 4 and 8 bits in each group size the tensor-core decode matvecs take,
// fed 1, 3 and 8 tokens a step (their one-, two- and four-pass kernels; one row on the
// shared-parameter kernel where it applies), and the same through the dp4a kernels
// (HEARTH_CUDA_MV_MMA=0): each within a mean KL of 2e-2 of the scalar CPU. Its logits are steeper
// than the fixtures': the CPU's own VNNI kernels, which round x to int8 per group as these do, are
// 2.9e-3 to 7.4e-3 from the scalar ones on it (f32 weights). The two GPU paths are as far from each
// other (measured 2e-3 to 7e-3): given the same x they agree to 5e-7 of the range
// (cuda_quant_ops_test), but a last-bit difference flips a few roundings of x to int8 in the next
// matvec, and those flip more in the one after.
TEST(CudaQuantized, WideModelDecodesOnTensorCoresAsTheScalarCpu) {
  if (device_count(DeviceType::kCuda) == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  write_wide_llama(tmp.path());
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(24);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 256);
  for (auto [bits, gs] : {std::pair{4, 32}, {4, 64}, {4, 128}, {8, 32}, {8, 64}}) {
    const std::string q = tmp.path() + "/q" + std::to_string(bits) + "g" + std::to_string(gs);
    int status = 0;
    std::string err;
    testing::run_hearth("convert " + tmp.path() + " -q --q-bits " + std::to_string(bits) + " --q-group-size " +
                            std::to_string(gs) + " --mlx-path " + q,
                        &status, &err);
    ASSERT_EQ(status, 0) << err;
    Tensor on_cpu;
    {
      const KnobOverride isa("HEARTH_ISA", "scalar");
      on_cpu = run_chunked(*load_model(q), Context{nullptr, kCpu}, tokens, 1 << 20, 16);
    }
    auto gpu = load_model(q, LoadOptions{.device = kGpu});
    for (int64_t chunk : {1, 3, 8}) {
      const Tensor mma = run_chunked(*gpu, Context{nullptr, kGpu}, tokens, chunk, 16);
      Tensor dp4a;
      {
        const KnobOverride knob("HEARTH_CUDA_MV_MMA", "0");
        dp4a = run_chunked(*gpu, Context{nullptr, kGpu}, tokens, chunk, 16);
      }
      const double kl = testing::mean_kl(on_cpu, mma), kl_dp4a = testing::mean_kl(on_cpu, dp4a);
      EXPECT_LE(kl, 2e-2) << bits << "-bit, groups of " << gs << ", " << chunk << " tokens a step";
      EXPECT_LE(kl_dp4a, 2e-2) << bits << "-bit, groups of " << gs << ", " << chunk << " tokens a step, dp4a";
      std::printf("wide %d-bit, groups of %d, %lld a step: mean KL to the scalar CPU %.3g (dp4a %.3g)\n", bits, gs,
                  static_cast<long long>(chunk), kl, kl_dp4a);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity, ::testing::ValuesIn(testing::parity_fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth
