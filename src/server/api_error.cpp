#include "server/api_error.h"

namespace hearth::server {

void bad_field(const std::string& field, const std::string& problem) {
  throw ApiError(400, field + ": " + problem, field);
}

nlohmann::ordered_json error_body(const std::string& message, const std::string& type, const std::string& code,
                                  const std::string& param) {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  // OpenAI clients read `param` (null when the error is not about one field).
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code;
  return {{"error", e}};
}

nlohmann::ordered_json error_body(const ApiError& e) { return error_body(e.what(), e.type(), e.code(), e.param()); }

}  // namespace hearth::server
