#include "server/generation_reader.h"

#include <cstdio>
#include <random>

#include "server/metrics.h"

namespace hearth::server {

namespace {

// Markup the output parser reads. Some tokenizers make these special tokens (Mistral's
// [TOOL_CALLS], Llama's <|python_tag|>), which decoding with skip_special_tokens would drop.
constexpr const char* kParsedMarkup[] = {"<think>",      "</think>", "<tool_call>", "</tool_call>",
                                         "[TOOL_CALLS]", "[ARGS]",   "[CALL_ID]",   "<|python_tag|>"};

// "call_" and 24 random hex digits, as OpenAI's tool call ids look.
// A tool call id. OpenAI's look like "call_" + 24 hex digits; Mistral's chat templates refuse
// to render a history whose ids are not exactly 9 alphanumerics, so Mistral gets those.
std::string new_call_id(ToolFormat format) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  if (format == ToolFormat::kMistral) {
    static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id(9, 'a');
    for (char& c : id) c = kAlnum[rng() % (sizeof kAlnum - 1)];
    return id;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "call_%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

}  // namespace

GenerationReader::GenerationReader(const Tokenizer& tok, const ReaderOptions& options,
                                   std::shared_ptr<RequestChannel> channel, ChannelItem first, Metrics* metrics)
    : tok_(tok),
      decoder_(tok, /*skip_special_tokens=*/true),
      stop_(options.stops),
      parser_(options.tool_format, options.parse_reasoning, options.starts_in_reasoning, options.tools,
              [format = options.tool_format] { return new_call_id(format); }),
      channel_(std::move(channel)),
      pending_(std::move(first)),
      metrics_(metrics),
      last_token_(std::chrono::steady_clock::now()) {
  if (options.tool_format != ToolFormat::kNone || options.parse_reasoning) {
    for (const char* markup : kParsedMarkup) {
      if (auto id = tok.token_to_id(markup); id && tok.is_special(*id)) kept_specials_.insert(*id);
    }
  }
}

GenerationReader::~GenerationReader() { channel_->cancel(); }

void GenerationReader::text(const std::string& decoded, std::vector<OutputEvent>* out) {
  if (decoded.empty() || stop_.stopped()) return;
  const std::string safe = stop_.push(decoded);
  if (!safe.empty()) parser_.push(safe, out);
  if (stop_.stopped()) {
    stop_sequence_ = stop_.matched();
    end(Finish::kStopSequence, out);
  }
}

void GenerationReader::end(Finish f, std::vector<OutputEvent>* out) {
  parser_.finish(out);
  if (parser_.saw_tool_call() && f == Finish::kEos) f = Finish::kToolCalls;
  finish_ = f;
  done_ = true;
  channel_->cancel();  // a stop string ends the generation: the engine need not go on
}

bool GenerationReader::next(ReaderStep* step) {
  step->events.clear();
  step->logprobs.clear();
  if (done_) return false;
  ChannelItem item;
  if (pending_) {
    item = std::move(*pending_);
    pending_.reset();
  } else {
    item = channel_->pop();
  }
  switch (item.kind) {
    case ChannelItem::Kind::kToken: {
      stats_ = item.stats;
      const auto now = std::chrono::steady_clock::now();
      if (completion_tokens_ > 0 && metrics_ != nullptr) {
        metrics_->observe_inter_token_latency(std::chrono::duration<double>(now - last_token_).count());
      }
      last_token_ = now;
      ++completion_tokens_;
      const int32_t id = item.token.token;
      if (item.token.logprobs) step->logprobs.push_back({id, std::move(*item.token.logprobs)});
      if (kept_specials_.count(id) != 0) {
        text(decoder_.flush() + tok_.decode(std::span<const int32_t>(&id, 1)), &step->events);
      } else {
        text(decoder_.push(id), &step->events);
      }
      return true;
    }
    case ChannelItem::Kind::kDone:
      stats_ = item.stats;
      text(decoder_.flush(), &step->events);
      if (!done_) {
        const std::string rest = stop_.flush();
        if (!rest.empty()) parser_.push(rest, &step->events);
        end(item.finish == FinishReason::kStop ? Finish::kEos : Finish::kLength, &step->events);
      }
      return true;
    case ChannelItem::Kind::kError:
      error_ = item.error;
      done_ = true;
      return false;
  }
  return false;
}

void accumulate(const ReaderStep& step, GenerationOutput* out) {
  for (const OutputEvent& e : step.events) {
    switch (e.kind) {
      case OutputEvent::Kind::kContent: out->content += e.text; break;
      case OutputEvent::Kind::kReasoning: out->reasoning += e.text; break;
      case OutputEvent::Kind::kToolCallBegin: out->tool_calls.push_back({e.id, e.name, ""}); break;
      case OutputEvent::Kind::kToolCallArguments:
        if (!out->tool_calls.empty()) out->tool_calls.back().arguments += e.text;
        break;
    }
  }
  out->logprobs.insert(out->logprobs.end(), step.logprobs.begin(), step.logprobs.end());
}

}  // namespace hearth::server
