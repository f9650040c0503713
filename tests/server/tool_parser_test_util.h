// Helpers for the output parser tests: every case is fed whole, one byte at a time and
// split in two at every position; all must give the same content, reasoning and calls.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "server/output_parser.h"

namespace hearth::server::tool_parser_test {

using nlohmann::json;
using nlohmann::ordered_json;
using Kind = OutputEvent::Kind;

struct Call {
  std::string id = {}, name = {}, arguments = {};
  bool operator==(const Call&) const = default;
};

struct Collected {
  std::string content, reasoning;
  std::vector<Call> calls;
  bool saw_tool_call = false;
  bool operator==(const Collected&) const = default;
};

inline void PrintTo(const Collected& c, std::ostream* os) {
  *os << "{content: " << json(c.content) << ", reasoning: " << json(c.reasoning) << ", calls: [";
  for (const Call& call : c.calls) *os << call.id << " " << call.name << " " << call.arguments << "; ";
  *os << "]}";
}

struct Options {
  ToolFormat format = ToolFormat::kNone;
  bool reasoning = false, starts_in_reasoning = false;
  ordered_json tools = ordered_json::array();
};

// Folds events into `c`, checking their order: a call's begin (with the next index) comes
// before its argument fragments.
inline void collect(const std::vector<OutputEvent>& events, Collected* c) {
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::kContent: c->content += e.text; break;
      case Kind::kReasoning: c->reasoning += e.text; break;
      case Kind::kToolCallBegin:
        ASSERT_EQ(e.index, static_cast<int>(c->calls.size()));
        c->calls.push_back({.id = e.id, .name = e.name});
        break;
      case Kind::kToolCallArguments:
        ASSERT_FALSE(c->calls.empty());
        ASSERT_EQ(e.index, static_cast<int>(c->calls.size()) - 1);
        c->calls.back().arguments += e.text;
        break;
    }
  }
}

inline Collected run(const Options& o, const std::vector<std::string_view>& pieces) {
  int n_ids = 0;
  OutputParser p(o.format, o.reasoning, o.starts_in_reasoning, o.tools,
                 [&n_ids] { return "call_" + std::to_string(n_ids++); });
  Collected c;
  std::vector<OutputEvent> events;
  for (std::string_view piece : pieces) p.push(piece, &events);
  p.finish(&events);
  collect(events, &c);
  c.saw_tool_call = p.saw_tool_call();
  for (const Call& call : c.calls) {
    EXPECT_TRUE(json::parse(call.arguments, nullptr, false).is_object()) << call.arguments;
  }
  return c;
}

// Parses `text` whole, byte by byte and split at every position; all must agree.
inline Collected parse(const Options& o, std::string_view text) {
  const Collected whole = run(o, {text});
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  EXPECT_EQ(run(o, bytes), whole) << "byte by byte: " << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(run(o, {text.substr(0, i), text.substr(i)}), whole) << "split at " << i << ": " << text;
  }
  EXPECT_EQ(whole.saw_tool_call, !whole.calls.empty());
  return whole;
}

inline void expect_call(const Collected& c, size_t i, const std::string& name, const std::string& arguments) {
  ASSERT_LT(i, c.calls.size());
  EXPECT_EQ(c.calls[i].id, "call_" + std::to_string(i));
  EXPECT_EQ(c.calls[i].name, name);
  EXPECT_EQ(json::parse(c.calls[i].arguments), json::parse(arguments)) << c.calls[i].arguments;
}

// The text passes through unchanged as content, with no calls.
inline void expect_content_only(const Options& o, std::string_view text) {
  const Collected c = parse(o, text);
  EXPECT_EQ(c.content, text);
  EXPECT_EQ(c.reasoning, "");
  EXPECT_TRUE(c.calls.empty());
}

}  // namespace hearth::server::tool_parser_test
