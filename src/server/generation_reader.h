// The HTTP side of one generation: tokens from the engine thread -> streaming detokenizer ->
// stop strings -> reasoning / tool-call parsing -> OutputEvents, one engine token per step.
// Both API formats (OpenAI, Anthropic) and both modes (streamed, whole) read a generation
// through this one class. Destroying it cancels the engine's work for the request.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "server/engine_worker.h"
#include "server/output_parser.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

class Metrics;

// How a response ended, as the APIs tell it apart.
enum class Finish { kNone, kEos, kStopSequence, kLength, kToolCalls };

struct ReaderOptions {
  std::vector<std::string> stops;
  ToolFormat tool_format = ToolFormat::kNone;  // kNone: tool markup stays content
  bool parse_reasoning = false;
  bool starts_in_reasoning = false;  // the prompt opened <think>
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

struct TokenLogprob {
  int32_t token = 0;
  TokenLogprobs logprobs;
};

struct ReaderStep {
  std::vector<OutputEvent> events;
  std::vector<TokenLogprob> logprobs;  // of the token(s) this step read
};

class GenerationReader {
 public:
  // `first` is the channel's first item, already read (a token or the end).
  GenerationReader(const Tokenizer& tok, const ReaderOptions& options, std::shared_ptr<RequestChannel> channel,
                   ChannelItem first, Metrics* metrics);
  ~GenerationReader();
  GenerationReader(const GenerationReader&) = delete;
  GenerationReader& operator=(const GenerationReader&) = delete;

  // Reads one engine item into *step (cleared first); false once the generation has ended
  // (then finish(), error() and the counts are final; the last step may carry events).
  bool next(ReaderStep* step);
  void cancel() { channel_->cancel(); }
  bool done() const { return done_; }
  Finish finish() const { return finish_; }
  const std::string& stop_sequence() const { return stop_sequence_; }  // kStopSequence: which one
  const std::string& error() const { return error_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_tokens() const { return stats_.cached_tokens; }
  const GenerationStats& stats() const { return stats_; }

 private:
  void text(const std::string& decoded, std::vector<OutputEvent>* out);
  void end(Finish f, std::vector<OutputEvent>* out);

  const Tokenizer& tok_;
  StreamingDecoder decoder_;
  StopMatcher stop_;
  OutputParser parser_;
  std::unordered_set<int32_t> kept_specials_;  // special tokens whose text the parser needs
  std::shared_ptr<RequestChannel> channel_;
  std::optional<ChannelItem> pending_;
  Metrics* metrics_;
  std::chrono::steady_clock::time_point last_token_;
  bool done_ = false;
  Finish finish_ = Finish::kNone;
  std::string stop_sequence_, error_;
  int64_t completion_tokens_ = 0;
  GenerationStats stats_;
};

// Accumulates a whole response (the non-streaming mode).
struct ToolCallOut {
  std::string id, name, arguments;
};
struct GenerationOutput {
  std::string content, reasoning;
  std::vector<ToolCallOut> tool_calls;
  std::vector<TokenLogprob> logprobs;
};
void accumulate(const ReaderStep& step, GenerationOutput* out);

}  // namespace hearth::server
