// Model parity against Hugging Face transformers (fixtures from scripts/fixtures/):
// f32 logits within 1e-4 of the logit range, identical greedy continuations, and the same
// logits however the sequence is split into steps or batched with other sequences.
#include <gtest/gtest.h>

#include <random>

#include "base/knobs.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "test_util.h"

namespace hearth {
namespace {

using testing::data_path;

struct Fixture {
  std::string dir;
  std::vector<int32_t> tokens;
  std::vector<int32_t> greedy;
  Tensor ref_logits;  // [T, V]
};

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.dir = data_path("parity/" + name);
  const std::string ref = f.dir + "/reference.safetensors";
  f.tokens = testing::read_ids(ref, "tokens");
  f.greedy = testing::read_ids(ref, "greedy");
  f.ref_logits = testing::read_tensor(ref, "logits");
  return f;
}

// Logits of every position of `tokens`, fed in steps of `chunk` tokens.
Tensor run_chunked(const Model& m, const std::vector<int32_t>& tokens, int64_t chunk, int64_t block_size,
                   ThreadPool& pool) {
  Engine engine(m, Context{&pool, kCpu}, EngineOptions{.block_size = block_size, .kv_tokens = 256});
  Sequence s;
  s.tokens = tokens;
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.info().vocab_size;
  Tensor out = Tensor::empty({T, V}, DType::kF32);
  for (int64_t done = 0; done < T;) {
    const int64_t n = std::min(chunk, T - done);
    const Tensor l = engine.step({{&s, n, true}});
    std::copy(l.data<float>(), l.data<float>() + l.numel(), out.data<float>() + done * V);
    done += n;
  }
  return out;
}

void expect_parity(const Tensor& got, const Fixture& f, const std::string& what) {
  int64_t where = 0;
  const float diff = testing::max_abs_diff(got, f.ref_logits, &where);
  const float tol = 1e-4f * testing::max_abs(f.ref_logits);
  EXPECT_LE(diff, tol) << what << ": worst logit " << where << " (row " << where / f.ref_logits.dim(1) << ") got "
                       << got.data<float>()[where] << " want " << f.ref_logits.data<float>()[where];
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, PrefillLogitsMatchTransformers) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir);
  ThreadPool pool(2);
  expect_parity(run_chunked(*m, f.tokens, 1 << 20, 16, pool), f, "one prefill");
}

TEST_P(Parity, ScalarKernelsMatchTransformers) {
  const KnobOverride isa("HEARTH_ISA", "scalar");
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir);
  ThreadPool pool(1);
  expect_parity(run_chunked(*m, f.tokens, 1 << 20, 16, pool), f, "scalar kernels");
}

TEST_P(Parity, ChunkedAndTokenByTokenMatchOnePrefill) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir);
  ThreadPool pool(2);
  const Tensor whole = run_chunked(*m, f.tokens, 1 << 20, 16, pool);
  for (int64_t chunk : {1, 7, 16}) {
    for (int64_t block : {1, 4, 16}) {
      const Tensor part = run_chunked(*m, f.tokens, chunk, block, pool);
      EXPECT_LE(testing::max_abs_diff(part, whole), 1e-5f * testing::max_abs(whole))
          << "chunk " << chunk << " block " << block;
      expect_parity(part, f, "chunk " + std::to_string(chunk) + " block " + std::to_string(block));
    }
  }
}

TEST_P(Parity, FlatBatchWithOtherSequencesMatches) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir);
  ThreadPool pool(2);
  Engine engine(*m, Context{&pool, kCpu}, EngineOptions{.block_size = 8, .kv_tokens = 1024});
  std::mt19937 rng(7);
  auto random_tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(m->info().vocab_size));
    return t;
  };
  // Two neighbours of other lengths; one has a head start so the batch mixes prefill chunks
  // of different context lengths, and their blocks interleave with the fixture's.
  Sequence a, b, s;
  a.tokens = random_tokens(23);
  b.tokens = random_tokens(57);
  s.tokens = f.tokens;
  engine.step({{&b, 9}});
  const int64_t T = static_cast<int64_t>(s.tokens.size()), V = m->info().vocab_size;
  Tensor got = Tensor::empty({T, V}, DType::kF32);
  // Steps: the fixture sequence advances 13, 13, 14 tokens beside the others.
  int64_t done = 0;
  for (int64_t n : {13, 13, 14}) {
    std::vector<Engine::Work> work;
    if (a.n_cached < static_cast<int64_t>(a.tokens.size()))
      work.push_back({&a, std::min<int64_t>(10, 23 - a.n_cached), false});
    work.push_back({&s, n, true});
    if (b.n_cached < static_cast<int64_t>(b.tokens.size()))
      work.push_back({&b, std::min<int64_t>(11, 57 - b.n_cached), true});
    const Tensor l = engine.step(work);
    const int64_t s_first_row = work.front().seq == &a ? 1 : 0;  // a contributes one row (its last token)
    std::copy(l.data<float>() + s_first_row * V, l.data<float>() + (s_first_row + n) * V, got.data<float>() + done * V);
    done += n;
  }
  expect_parity(got, f, "flat batch");
}

TEST_P(Parity, GreedyContinuationMatchesTransformers) {
  const Fixture f = load_fixture(GetParam());
  auto m = load_model(f.dir);
  ThreadPool pool(2);
  Engine engine(*m, Context{&pool, kCpu});
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

// The exact CLI forms external checks use.
TEST_P(Parity, CliLogitsAndGenerate) {
  const Fixture f = load_fixture(GetParam());
  testing::TempDir tmp;
  const std::string ids = testing::join_ids(f.tokens);
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(HEARTH_BINARY) + " logits --model " + f.dir + " --tokens " + ids +
                                     " --out " + tmp.file("l.safetensors"),
                                 &out),
            0)
      << out;
  expect_parity(testing::read_tensor(tmp.file("l.safetensors"), "logits"), f, "hearth logits");
  EXPECT_EQ(testing::read_ids(tmp.file("l.safetensors"), "tokens"), f.tokens);

  out.clear();
  ASSERT_EQ(
      testing::run_command(std::string(HEARTH_BINARY) + " generate --model " + f.dir + " --prompt-tokens " + ids +
                               " --max-tokens " + std::to_string(f.greedy.size()) + " --temp 0 --ignore-eos --json",
                           &out),
      0)
      << out;
  const std::string want = testing::join_ids(f.greedy);
  EXPECT_NE(out.find("\"tokens\":[" + want + "]"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(testing::parity_fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth
