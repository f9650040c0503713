// Which model bare `hearth` serves (src/cli/model_choice.h): a fake Hugging Face cache in a temp
// dir, with sparse weight files for the sizes, and bare `hearth` as a process.
#include "cli/model_choice.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.h"
#include "base/knobs.h"
#include "test_util.h"

extern char** environ;

namespace hearth::cli {
namespace {

namespace fs = std::filesystem;
using hearth::testing::TempDir;

constexpr int64_t kGiB = int64_t{1} << 30;
const std::vector<std::string> kTypes = {"llama", "qwen3"};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// models--ORG--NAME/{blobs,refs/main,snapshots/REV} as huggingface_hub lays it out: snapshot
// files are symlinks into blobs/. The weights are a sparse file of `bytes`.
fs::path add_cached(const fs::path& hub, const std::string& org_name, int64_t bytes,
                    const std::string& model_type = "qwen3", const std::string& rev = "abc123") {
  std::string base = "models--" + org_name;
  base.replace(base.find('/'), 1, "--");
  const fs::path repo = hub / base, snap = repo / "snapshots" / rev;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snap);
  write(repo / "refs" / "main", rev);
  write(snap / "config.json", R"({"model_type": ")" + model_type + R"("})");
  write(snap / "tokenizer.json", "{}");
  const fs::path blob = repo / "blobs" / ("weights-" + rev);
  std::ofstream(blob).close();
  fs::resize_file(blob, static_cast<uintmax_t>(bytes));
  fs::create_symlink(fs::path("../../blobs") / blob.filename(), snap / "model.safetensors");
  return snap;
}

TEST(model_choice, ScanFindsCompleteSupportedModels) {
  TempDir tmp;
  const fs::path hub = tmp.path();
  add_cached(hub, "org/small", kGiB);
  add_cached(hub, "org/llama", 2 * kGiB, "llama");
  add_cached(hub, "org/bert", kGiB, "bert");                          // unsupported model_type
  fs::remove(add_cached(hub, "org/notok", kGiB) / "tokenizer.json");  // no tokenizer: no chat
  fs::remove(add_cached(hub, "org/noweights", kGiB) / "model.safetensors");
  // A sharded model whose second shard has not been downloaded yet.
  const fs::path sharded = add_cached(hub, "org/partial", kGiB);
  fs::rename(sharded / "model.safetensors", sharded / "model-00001-of-00002.safetensors");
  write(sharded / "model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  fs::create_directories(hub / "datasets--org--data");

  const auto models = scan_hf_cache(hub.string(), kTypes);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "org/llama");
  EXPECT_EQ(models[0].weight_bytes, 2 * kGiB);
  EXPECT_EQ(models[1].name, "org/small");
  EXPECT_EQ(models[1].dir, (hub / "models--org--small" / "snapshots" / "abc123").string());

  // The missing shard arrives: the sharded model counts, with both shards' bytes.
  std::ofstream(sharded / "model-00002-of-00002.safetensors").close();
  fs::resize_file(sharded / "model-00002-of-00002.safetensors", static_cast<uintmax_t>(kGiB));
  const auto after = scan_hf_cache(hub.string(), kTypes);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[1].name, "org/partial");
  EXPECT_EQ(after[1].weight_bytes, 2 * kGiB);
}

TEST(model_choice, SnapshotIsTheOneRefsMainNames) {
  TempDir tmp;
  add_cached(tmp.path(), "org/m", kGiB, "qwen3", "old");
  add_cached(tmp.path(), "org/m", 3 * kGiB, "qwen3", "new");  // rewrites refs/main to "new"
  auto models = scan_hf_cache(tmp.path(), kTypes);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].weight_bytes, 3 * kGiB);
  write(fs::path(tmp.path()) / "models--org--m" / "refs" / "main", "old\n");
  models = scan_hf_cache(tmp.path(), kTypes);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].weight_bytes, kGiB);
}

TEST(model_choice, LargestThatFitsElseDemo) {
  TempDir tmp, demo;
  const fs::path hub = fs::path(tmp.path()) / "hub";
  add_cached(hub, "org/one", kGiB);
  add_cached(hub, "org/three", 3 * kGiB);
  add_cached(hub, "org/twenty", 20 * kGiB);
  write(fs::path(demo.path()) / "config.json", "{}");
  ChoiceInputs in{hub.string(), kTypes, 8 * kGiB, {"/nonexistent/demo", demo.path()}};

  ModelChoice c = choose_model(in);
  EXPECT_EQ(c.name, "org/three");
  EXPECT_NE(c.reason.find("largest of 3 model(s)"), std::string::npos) << c.reason;

  in.available_bytes = memory_needed_bytes(20 * kGiB);  // exactly enough
  EXPECT_EQ(choose_model(in).name, "org/twenty");
  in.available_bytes = memory_needed_bytes(kGiB) - 1;  // nothing fits
  c = choose_model(in);
  EXPECT_EQ(c.name, "hearth-demo");
  EXPECT_EQ(c.dir, demo.path());
  EXPECT_NE(c.reason.find("none of the 3 model(s)"), std::string::npos) << c.reason;

  in.hub_dir = (fs::path(tmp.path()) / "missing").string();
  c = choose_model(in);
  EXPECT_EQ(c.dir, demo.path());
  EXPECT_NE(c.reason.find("no servable model"), std::string::npos) << c.reason;
}

TEST(model_choice, NoModelAnywhereSaysWhereItLooked) {
  TempDir tmp;
  try {
    choose_model({tmp.path(), kTypes, 64 * kGiB, {"/nonexistent/a", "/nonexistent/b"}});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/a, /nonexistent/b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("hearth serve MODEL_DIR"), std::string::npos) << msg;
  }
}

TEST(model_choice, PlacesComeFromKnobs) {
  {
    KnobOverride hf("HF_HOME", "/data/hf");
    EXPECT_EQ(hf_hub_dir(), "/data/hf/hub");
  }
  {
    KnobOverride hf("HF_HOME", "");
    KnobOverride home("HOME", "/home/u");
    EXPECT_EQ(hf_hub_dir(), "/home/u/.cache/huggingface/hub");
  }
  {
    KnobOverride demo("HEARTH_DEMO_MODEL", "");
    EXPECT_EQ(
        demo_model_dirs("/opt/hearth/bin"),
        (std::vector<std::string>{"/opt/hearth/models/hearth-demo", "/opt/hearth/share/hearth/models/hearth-demo"}));
  }
  KnobOverride demo("HEARTH_DEMO_MODEL", "/my/demo");
  EXPECT_EQ(demo_model_dirs("/x/build").front(), "/my/demo");
  EXPECT_GT(available_memory_bytes(), 0);
}

// Bare `hearth` as a process, with its environment, until it prints the chat UI's URL.
class BareHearth {
 public:
  BareHearth(const std::vector<std::string>& env_extra, const std::vector<std::string>& flags) {
    out_path_ = tmp_.file("stdout");
    std::vector<std::string> args = {HEARTH_BINARY, "--port", "0", "--threads", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("HF_HOME=", 0) != 0 && kv.rfind("HEARTH_DEMO_MODEL=", 0) != 0) env.push_back(kv);
    }
    env.insert(env.end(), env_extra.begin(), env_extra.end());
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&pid_, HEARTH_BINARY, &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    const std::string marker = "chat UI: http://127.0.0.1:";
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      out_ = read_out();
      if (const size_t at = out_.find(marker); at != std::string::npos && out_.find('\n', at) != std::string::npos)
        port_ = std::atoi(out_.c_str() + at + marker.size());
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~BareHearth() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  int port() const { return port_; }
  const std::string& out() const { return out_; }
  std::string served_id() {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get("/v1/models");
    if (!r || r->status != 200) return "";
    return nlohmann::json::parse(r->body)["data"][0]["id"].get<std::string>();
  }

 private:
  std::string read_out() const {
    std::ifstream in(out_path_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  TempDir tmp_;
  std::string out_path_, out_;
  pid_t pid_ = 0;
  int port_ = 0;
};

// A real servable model in a fake HF cache: the tiny test model's files behind blob symlinks.
void add_tiny_cached(const fs::path& hub, const std::string& org_name) {
  const fs::path snap = add_cached(hub, org_name, 0);
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) fs::remove(snap / f);
  auto tiny = hearth::testing::make_tiny_model_dir();
  for (const auto& e : fs::directory_iterator(tiny->path())) fs::copy(e.path(), snap / e.path().filename());
}

TEST(bare_hearth, ServesTheDemoModelAndTheChatUi) {
  TempDir hf;
  auto demo = hearth::testing::make_tiny_model_dir();
  BareHearth h({"HF_HOME=" + hf.path(), "HEARTH_DEMO_MODEL=" + demo->path()}, {});
  ASSERT_NE(h.port(), 0) << h.out();
  EXPECT_NE(h.out().find("hearth: model " + demo->path() +
                         ": the bundled demo model (no servable model in the "
                         "Hugging Face cache " +
                         hf.path() + "/hub)"),
            std::string::npos)
      << h.out();
  EXPECT_EQ(h.served_id(), "hearth-demo");
  httplib::Client c("127.0.0.1", h.port());
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(r->body.find("<script src=\"/ui/app.js\""), std::string::npos);
}

TEST(bare_hearth, PicksTheCachedModelAndAnExplicitOneWins) {
  TempDir hf;
  add_tiny_cached(fs::path(hf.path()) / "hub", "someorg/tiny-chat");
  {
    BareHearth h({"HF_HOME=" + hf.path(), "HEARTH_DEMO_MODEL=/nonexistent"}, {});
    ASSERT_NE(h.port(), 0) << h.out();
    EXPECT_NE(h.out().find("the largest of 1 model(s) in the Hugging Face cache"), std::string::npos) << h.out();
    EXPECT_EQ(h.served_id(), "someorg/tiny-chat");
  }
  auto other = hearth::testing::make_tiny_model_dir();
  BareHearth h({"HF_HOME=" + hf.path()}, {"--model", other->path()});
  ASSERT_NE(h.port(), 0) << h.out();
  EXPECT_EQ(h.out().find("hearth: model "), std::string::npos) << h.out();  // no choice made
  EXPECT_EQ(h.served_id(), other->path());
}

TEST(bare_hearth, HelpMentionsBareServe) {
  int status = 0;
  const std::string help = hearth::testing::run_hearth("--help", &status);
  EXPECT_EQ(status, 0);
  EXPECT_NE(help.find("Bare `hearth`"), std::string::npos) << help;
  EXPECT_NE(help.find("serve "), std::string::npos) << help;
  const std::string serve_help = hearth::testing::run_hearth("serve --help", &status);
  EXPECT_NE(serve_help.find("--open"), std::string::npos) << serve_help;
  EXPECT_NE(serve_help.find("largest model in the Hugging Face cache"), std::string::npos) << serve_help;
}

}  // namespace
}  // namespace hearth::cli
