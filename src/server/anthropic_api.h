// The Anthropic Messages format (/v1/messages): request -> a ParsedRequest rendered through
// the model's chat template (content blocks become the OpenAI-style messages templates
// expect); a generation -> a message body or the message_start ... message_stop events.
// Errors use Anthropic's shape: {"type":"error","error":{"type","message"}}.
#pragma once

#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/request.h"
#include "server/stream_writer.h"

namespace hearth::server {

ParsedRequest parse_messages_request(const ojson& body, const ModelContext& ctx);

ojson anthropic_response(const ResponseMeta& m, const GenerationOutput& out, const GenerationReader& reader);
std::unique_ptr<StreamWriter> anthropic_stream_writer(const ResponseMeta& m);

// An error in Anthropic's shape, the error type chosen by HTTP status.
ojson anthropic_error_body(int status, const std::string& message);

}  // namespace hearth::server
