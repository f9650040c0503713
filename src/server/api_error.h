// Errors a request can end in, as the OpenAI API writes them: an HTTP status and
// {"error": {"message", "type", "param", "code"}}. Validation throws ApiError (an InputError,
// so everything that already throws InputError for bad input maps to a 400 as well).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace hearth::server {

class ApiError : public InputError {
 public:
  // `param` names the offending request field ("" when none); `code` is a short machine
  // readable reason such as "invalid_value" or "queue_full".
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "invalid_value",
           std::string type = "invalid_request_error")
      : InputError(message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)),
        type_(std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_, code_, type_;
};

// A 400 for a bad field: "FIELD: problem".
[[noreturn]] void bad_field(const std::string& field, const std::string& problem);

// The JSON body of an error response.
nlohmann::ordered_json error_body(const std::string& message, const std::string& type, const std::string& code,
                                  const std::string& param = "");
nlohmann::ordered_json error_body(const ApiError& e);

}  // namespace hearth::server
