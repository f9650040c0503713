// A streamed response in one API's event format: the HTTP layer reads ReaderSteps from a
// GenerationReader and writes what the StreamWriter makes of them.
#pragma once

#include <cstdint>
#include <string>

#include "server/generation_reader.h"

namespace hearth::server {

enum class Endpoint;

// What a response says about itself, whatever its format.
struct ResponseMeta {
  Endpoint endpoint;
  std::string id;  // chatcmpl-... / cmpl-... / msg_...
  int64_t created = 0;
  std::string model;
  int64_t prompt_tokens = 0;
  bool include_usage = false;  // OpenAI stream_options.include_usage
  bool logprobs = false;
};

class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual std::string begin() = 0;  // frames before the first token
  virtual std::string step(const ReaderStep& step) = 0;
  virtual std::string end(const GenerationReader& reader) = 0;  // after a generation ended normally
  virtual std::string error(const std::string& message) = 0;    // after an engine error mid-stream
};

// One server-sent event: "event: NAME\n" (when given) "data: JSON\n\n".
std::string sse_frame(const nlohmann::ordered_json& data, const char* event = nullptr);

}  // namespace hearth::server
