// The chat UI's files (src/server/ui/), compiled into the binary by cmake/embed_files.cmake so
// that `hearth serve` needs no files at run time.
#pragma once

#include <string_view>

namespace hearth::server {

struct UiAsset {
  std::string_view path;  // the URL path it is served at, e.g. "/" or "/ui/app.js"
  std::string_view content_type;
  std::string_view body;
};

// The asset served at PATH, or nullptr.
const UiAsset* find_ui_asset(std::string_view path);

}  // namespace hearth::server
