// Helpers shared by tests: fixture paths, reading reference tensors, closeness checks.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/safetensors.h"

namespace hearth::testing {

inline std::string data_path(const std::string& rel) { return std::string(HEARTH_TEST_DATA) + "/" + rel; }

inline std::vector<std::string> parity_fixtures() {
  return {"llama3_tied", "llama_bias_linear", "mistral_swa", "qwen2_yarn", "qwen3"};
}

inline Tensor read_tensor(const std::string& path, const std::string& name) {
  auto f = SafetensorsFile::open(path);
  const SafetensorsEntry* e = f->find(name);
  if (e == nullptr) throw std::runtime_error(path + ": no tensor " + name);
  return f->tensor(*e).copy();
}

inline std::vector<int32_t> read_ids(const std::string& path, const std::string& name) {
  const Tensor t = read_tensor(path, name);
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

inline float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.data<float>()[i]));
  return m;
}

// Largest |a - b| over two f32 tensors of the same shape; `where` gets its index.
inline float max_abs_diff(const Tensor& a, const Tensor& b, int64_t* where = nullptr) {
  EXPECT_EQ(a.shape(), b.shape()) << a.str() << " vs " << b.str();
  float worst = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    const float d = std::fabs(a.data<float>()[i] - b.data<float>()[i]);
    if (!(d <= worst)) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

// Mean over rows of KL(softmax(ref) || softmax(got)); rows are the last dim.
inline double mean_kl(const Tensor& ref, const Tensor& got) {
  const int64_t V = ref.dim(-1), R = ref.numel() / V;
  double total = 0;
  for (int64_t r = 0; r < R; ++r) {
    const float* p = ref.data<float>() + r * V;
    const float* q = got.data<float>() + r * V;
    double mp = -INFINITY, mq = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mp = std::max(mp, double(p[i])), mq = std::max(mq, double(q[i]));
    double sp = 0, sq = 0;
    for (int64_t i = 0; i < V; ++i) sp += std::exp(p[i] - mp), sq += std::exp(q[i] - mq);
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double lp = p[i] - mp - std::log(sp), lq = q[i] - mq - std::log(sq);
      kl += std::exp(lp) * (lp - lq);
    }
    total += kl;
  }
  return total / static_cast<double>(R);
}

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t t : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(t);
  }
  return out;
}

// Runs a shell command, returns its exit status; stdout+stderr go to `output`.
inline int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A fresh temporary directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("hearth_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Runs `hearth ARGS` with `input` on stdin; returns stdout, sets *status to the exit code and
// *err (when given) to stderr.
inline std::string run_hearth(const std::string& args, const std::string& input, int* status,
                              std::string* err = nullptr) {
  TempDir tmp;
  const std::string in_path = tmp.file("stdin"), err_path = tmp.file("stderr");
  std::ofstream(in_path, std::ios::binary) << input;
  const std::string cmd = std::string(HEARTH_BINARY) + " " + args + " <" + in_path + " 2>" + err_path;
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p != nullptr && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = p == nullptr ? -1 : pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  std::ifstream in(err_path);
  const std::string e((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (err) *err = e;
  return out;
}
inline std::string run_hearth(const std::string& args, int* status, std::string* err = nullptr) {
  return run_hearth(args, "", status, err);
}

// A tiny model with text support: the qwen3 parity weights plus a byte-level tokenizer that fits
// their 1000-token vocabulary (scripts/fixtures/make_tiny_tokenizer.py), copied to a fresh dir.
inline std::unique_ptr<TempDir> make_tiny_model_dir() {
  auto dir = std::make_unique<TempDir>();
  for (const char* src : {"parity/qwen3", "tiny_tokenizer"}) {
    for (const auto& e : std::filesystem::directory_iterator(data_path(src)))
      std::filesystem::copy(e.path(), dir->path());
  }
  return dir;
}

}  // namespace hearth::testing
