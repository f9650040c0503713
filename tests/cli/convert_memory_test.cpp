// hearth convert streams: a checkpoint many times larger than its largest tensor converts, to
// MLX 4-bit and to GGUF Q8_0, with a peak resident set far below the checkpoint's size (each
// source tensor's mapped pages leave the resident set once it is written).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;
  long peak_rss_kib = 0;
};

// Runs argv (stdout and stderr to /dev/null); its exit status and peak resident set.
Outcome run_measured(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  Outcome o;
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && ::wait4(pid, &status, 0, &usage) == pid) {
    o.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.peak_rss_kib = usage.ru_maxrss;
  }
  return o;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

TEST(ConvertMemory, PeakResidentSetStaysFarBelowTheCheckpoint) {
  // ASan keeps freed blocks in its quarantine (256 MiB by default) and adds shadow memory, so
  // a resident set says nothing about the converter there.
  if (kAddressSanitizer) GTEST_SKIP() << "resident sets are not measured under AddressSanitizer";
  testing::TempDir tmp;
  // 24 layers of 3 MiB matrices at most, f32: a ~330 MiB checkpoint whose largest tensor is 3 MiB.
  const nlohmann::json config = {
      {"model_type", "llama"},       {"vocab_size", 1000},      {"hidden_size", 512},
      {"intermediate_size", 1536},   {"num_hidden_layers", 24}, {"num_attention_heads", 8},
      {"num_key_value_heads", 8},    {"rms_norm_eps", 1e-5},    {"max_position_embeddings", 4096},
      {"tie_word_embeddings", false}};
  std::ofstream(tmp.file("config.json")) << config.dump();
  const std::string model = tmp.file("model");
  ASSERT_EQ(
      run_measured({HEARTH_MAKE_RANDOM_MODEL, model, "--config", tmp.file("config.json"), "--dtype", "f32"}).status, 0);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(testing::data_path("tiny_tokenizer/") + f, model + "/" + f);
  const long checkpoint_kib = static_cast<long>(fs::file_size(model + "/model.safetensors") / 1024);
  ASSERT_GT(checkpoint_kib, 300 * 1024);

  const Outcome mlx = run_measured({HEARTH_BINARY, "convert", model, "-q", "--mlx-path", tmp.file("q4")});
  const Outcome gguf =
      run_measured({HEARTH_BINARY, "convert", model, "--to", "gguf", "--type", "q8_0", "--out", tmp.file("m.gguf")});
  ASSERT_EQ(mlx.status, 0);
  ASSERT_EQ(gguf.status, 0);
  std::printf("checkpoint %ld MiB; peak RSS: MLX 4-bit %ld MiB, GGUF Q8_0 %ld MiB\n", checkpoint_kib / 1024,
              mlx.peak_rss_kib / 1024, gguf.peak_rss_kib / 1024);
  EXPECT_LT(mlx.peak_rss_kib, checkpoint_kib / 4);
  EXPECT_LT(gguf.peak_rss_kib, checkpoint_kib / 4);
}

}  // namespace
}  // namespace hearth
