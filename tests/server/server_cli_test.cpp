// `hearth serve` as a process: it prints its URL when ready, refuses a taken port with one
// line and exit 1, and stops cleanly on SIGTERM.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>

#include "server_fixture.h"

extern char** environ;

namespace hearth::server {
namespace {

using testing::json;

// A socket listening on a free loopback port; returns the fd and sets *port.
int listen_on_free_port(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(server_cli, TakenPortIsOneLineAndExit1) {
  auto dir = testing::make_tiny_model_dir();
  int port = 0;
  const int fd = listen_on_free_port(&port);
  int status = 0;
  std::string err;
  testing::run_hearth("serve " + dir->path() + " --port " + std::to_string(port), &status, &err);
  close(fd);
  EXPECT_EQ(status, 1);
  EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Serves MODEL (a directory or a GGUF file) as a process: ready line, /health, a chat
// completion, then SIGTERM and exit 0.
void serve_chat_and_stop(const std::string& model) {
  hearth::testing::TempDir tmp;
  const std::string out_path = tmp.file("stdout");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {HEARTH_BINARY, "serve", model, "--port", "0", "--threads", "1"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, HEARTH_BINARY, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Wait for "serving ... at http://127.0.0.1:PORT".
  int port = 0;
  const std::string url = "http://127.0.0.1:";
  for (int i = 0; i < 300 && port == 0; ++i) {
    std::ifstream in(out_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (const size_t at = text.find(url); at != std::string::npos && text.find('\n', at) != std::string::npos) {
      port = std::atoi(text.c_str() + at + url.size());
    }
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(port, 0) << "the server printed no URL";
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json body = json::parse(r->body);
  EXPECT_EQ(body["model"], model);
  // Greedy may meet the tiny vocabulary's end token before the limit.
  const int completion_tokens = body["usage"]["completion_tokens"].get<int>();
  EXPECT_TRUE(completion_tokens >= 1 && completion_tokens <= 3) << r->body;

  kill(pid, SIGTERM);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

TEST(server_cli, ServesUntilSigterm) {
  auto dir = testing::make_tiny_model_dir();
  serve_chat_and_stop(dir->path());
}

// A GGUF file is a complete model for serve too: weights, tokenizer and chat template.
TEST(server_cli, ServesAGgufFile) {
  auto dir = testing::make_tiny_model_dir();
  hearth::testing::TempDir tmp;
  int status = -1;
  std::string err;
  const std::string gguf = tmp.file("tiny-q8_0.gguf");
  testing::run_hearth("convert " + dir->path() + " --to gguf --type q8_0 --out " + gguf, &status, &err);
  ASSERT_EQ(status, 0) << err;
  serve_chat_and_stop(gguf);
}

}  // namespace
}  // namespace hearth::server
