// The OpenAI formats: /v1/chat/completions and /v1/completions bodies -> a validated
// ParsedRequest; a generation -> a response body or SSE chunks. Validation errors are
// ApiErrors (400) that name the field.
#pragma once

#include <memory>
#include <string>

#include "server/request.h"
#include "server/stream_writer.h"

namespace hearth::server {

ParsedRequest parse_chat_request(const ojson& body, const ModelContext& ctx);
ParsedRequest parse_completion_request(const ojson& body, const ModelContext& ctx);

std::string finish_reason_text(Finish f);
ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
// Non-streaming body.
ojson openai_response(const ResponseMeta& m, const GenerationOutput& out, const GenerationReader& reader,
                      const Tokenizer& tok);
// SSE chunks for a streamed response.
std::unique_ptr<StreamWriter> openai_stream_writer(const ResponseMeta& m, const Tokenizer& tok);

}  // namespace hearth::server
