// The chat UI is served from the binary: / and /ui/* with their content types, without the API
// key (the files hold no data), under a content security policy that allows only their own code.
#include <gtest/gtest.h>

#include "server/ui_assets.h"
#include "server_fixture.h"

namespace hearth::server {
namespace {

TEST(chat_ui_route, ServesTheEmbeddedFiles) {
  testing::InProcessServer s;
  auto c = s.client();
  const std::pair<const char*, const char*> files[] = {
      {"/", "text/html; charset=utf-8"},
      {"/ui/app.js", "text/javascript; charset=utf-8"},
      {"/ui/style.css", "text/css; charset=utf-8"},
  };
  for (const auto& [path, type] : files) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), type) << path;
    const UiAsset* asset = find_ui_asset(path);
    ASSERT_NE(asset, nullptr) << path;
    EXPECT_GT(r->body.size(), 500u) << path;
    EXPECT_EQ(r->body, asset->body) << path;
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  }
  auto page = c.Get("/");
  EXPECT_NE(page->body.find("<script src=\"/ui/app.js\""), std::string::npos);
  EXPECT_NE(page->body.find("<link rel=\"stylesheet\" href=\"/ui/style.css\">"), std::string::npos);
  // The page talks to the public API only.
  const std::string js(find_ui_asset("/ui/app.js")->body);
  for (const char* route : {"\"/v1/chat/completions\"", "\"/v1/models\"", "\"/stats\""})
    EXPECT_NE(js.find(route), std::string::npos) << route;

  auto missing = c.Get("/ui/missing.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(testing::json::parse(missing->body)["error"]["code"], "not_found");
  EXPECT_EQ(c.Get("/index.html")->status, 404);
}

TEST(chat_ui_route, NeedsNoKeyButTheApiStillDoes) {
  ServerOptions o;
  o.api_key = "secret";
  testing::InProcessServer s(o);
  auto c = s.client();
  EXPECT_EQ(c.Get("/")->status, 200);
  EXPECT_EQ(c.Get("/ui/app.js")->status, 200);
  EXPECT_EQ(c.Get("/ui/missing.js")->status, 401);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/stats")->status, 401);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer secret"}})->status, 200);
}

TEST(chat_ui_route, ModelsAndStatsCarryTheContextSize) {
  testing::InProcessServer s;
  auto c = s.client();
  const auto models = testing::json::parse(c.Get("/v1/models")->body);
  const auto stats = testing::json::parse(c.Get("/stats")->body);
  EXPECT_EQ(models["data"][0]["context_length"], stats["context_tokens"]);
  EXPECT_GT(stats["context_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(stats["model"], "tiny");
}

}  // namespace
}  // namespace hearth::server
