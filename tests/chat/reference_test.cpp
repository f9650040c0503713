// Chat templates against references made by the real thing: transformers' apply_chat_template
// renders (tests/data/tokenizer/reference/*.templates.json) and Jinja2 renders of llama.cpp's
// template collection (tests/data/chat/llamacpp_renders.json, scripts/fixtures/jinja_references.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/mapped_file.h"
#include "chat/template.h"
#include "test_util.h"

namespace hearth {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

json load_json(const std::string& path) { return json::parse(read_text_file(path)); }

// The moment jinja_references.py gives strftime_now: 2025-07-26 14:30:05 (a Saturday).
std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

// A special token from tokenizer_config.json: a string or an AddedToken object.
json token_text(const json& v) {
  if (v.is_object() && v.contains("content")) return v["content"];
  return v;
}

class TransformersReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersReference, RendersMatch) {
  const std::string name = GetParam();
  const std::string config_path = testing::data_path("external/tokenizers/" + name + "/tokenizer_config.json");
  if (!fs::exists(config_path)) FAIL() << config_path << " missing: run scripts/fetch_test_data.sh";
  const json config = load_json(config_path);
  const json ref = load_json(testing::data_path("tokenizer/reference/" + name + ".templates.json"));
  ChatTemplate tmpl = ChatTemplate::parse(config.at("chat_template").get<std::string>(), name);
  int n = 0;
  for (const json& c : ref.at("renders")) {
    // transformers' render_jinja_template: messages, tools (None when absent), documents,
    // add_generation_prompt, then the special tokens that are set and the template kwargs.
    json ctx = {{"messages", c.at("messages")},
                {"tools", c.value("tools", json())},
                {"documents", json()},
                {"add_generation_prompt", c.value("add_generation_prompt", false)}};
    for (const char* tok : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      if (config.contains(tok) && !config[tok].is_null()) ctx[tok] = token_text(config[tok]);
    }
    if (c.contains("kwargs")) {
      for (const auto& [k, v] : c["kwargs"].items()) ctx[k] = v;
    }
    const std::string what = name + "/" + c.at("name").get<std::string>();
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.render(ctx), TemplateError) << what << " (HF: " << c["error"] << ")";
    } else {
      try {
        EXPECT_EQ(tmpl.render(ctx), c.at("rendered").get<std::string>()) << what;
      } catch (const TemplateError& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
    ++n;
  }
  EXPECT_GT(n, 0);
}

INSTANTIATE_TEST_SUITE_P(chat, TransformersReference, ::testing::Values("qwen3", "llama3_1", "gemma3", "deepseek_v3"));

TEST(chat_LlamaCppTemplates, MatchJinja2) {
  const std::string dir = testing::data_path("external/chat_templates");
  if (!fs::exists(dir)) FAIL() << dir << " missing: run scripts/fetch_llamacpp_data.sh";
  const json ref = load_json(testing::data_path("chat/llamacpp_renders.json"));
  const std::tm now = fixed_now();
  int n_pass = 0, n_total = 0;
  for (const auto& [file, entry] : ref.at("templates").items()) {
    const std::string path = dir + "/" + file;
    if (!fs::exists(path)) {
      ADD_FAILURE() << file << ": missing from " << dir;
      continue;
    }
    const std::string source = read_text_file(path);
    std::string sha;
    testing::run_command("sha256sum '" + path + "' | cut -c1-64", &sha);
    if (sha.substr(0, 64) != entry.at("sha256").get<std::string>()) {
      ADD_FAILURE() << file << ": source changed upstream (sha256 differs); regenerate the references";
      continue;
    }
    std::optional<ChatTemplate> tmpl;
    try {
      tmpl = ChatTemplate::parse(source, file);
    } catch (const TemplateError& e) {
      ADD_FAILURE() << e.what();
      n_total += int(entry.at("renders").size());
      continue;
    }
    tmpl->set_clock([now] { return now; });
    for (const json& conv : ref.at("conversations")) {
      const std::string cname = conv.at("name").get<std::string>();
      const json& expect = entry.at("renders").at(cname);
      json ctx = {{"messages", conv.at("messages")},
                  {"tools", conv.at("tools")},
                  {"documents", json()},
                  {"add_generation_prompt", conv.at("add_generation_prompt")},
                  {"bos_token", ref.at("bos_token")},
                  {"eos_token", ref.at("eos_token")}};
      for (const auto& [k, v] : conv.at("kwargs").items()) ctx[k] = v;
      ++n_total;
      const std::string what = file + " x " + cname;
      if (expect.contains("error")) {
        try {
          tmpl->render(ctx);
          ADD_FAILURE() << what << ": rendered, but Jinja2 raised " << expect["error"];
        } catch (const TemplateError&) {
          ++n_pass;
        }
        continue;
      }
      try {
        const std::string got = tmpl->render(ctx);
        const std::string want = expect.at("rendered").get<std::string>();
        if (got == want) {
          ++n_pass;
        } else {
          size_t at = 0;
          while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
          const size_t from = at > 80 ? at - 80 : 0;
          ADD_FAILURE() << what << ": differs at byte " << at << "\n  want: " << json(want.substr(from, 200)).dump()
                        << "\n  got:  " << json(got.substr(from, 200)).dump();
        }
      } catch (const TemplateError& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
  }
  std::printf("llama.cpp templates: %d / %d renders match Jinja2\n", n_pass, n_total);
  EXPECT_EQ(n_pass, n_total);
}

}  // namespace
}  // namespace hearth
