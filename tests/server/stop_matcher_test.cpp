// StopMatcher: stop strings are cut from the text and no part of one is ever emitted early.
#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace hearth::server {
namespace {

// Feeds `pieces` one by one; returns everything emitted (push + flush).
std::string feed(StopMatcher& m, const std::vector<std::string>& pieces, std::vector<std::string>* emitted = nullptr) {
  std::string out;
  for (const std::string& p : pieces) {
    const std::string e = m.push(p);
    if (emitted) emitted->push_back(e);
    out += e;
  }
  return out + m.flush();
}

TEST(server_stop_matcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(server_stop_matcher, CutsAtStopSplitAcrossPieces) {
  StopMatcher m({"STOP"});
  std::vector<std::string> emitted;
  EXPECT_EQ(feed(m, {"hello S", "T", "O", "P world"}, &emitted), "hello ");
  EXPECT_TRUE(m.stopped());
  // "S", "ST", "STO" were held back, never emitted.
  EXPECT_EQ(emitted[0], "hello ");
  EXPECT_EQ(emitted[1], "");
  EXPECT_EQ(emitted[2], "");
  EXPECT_EQ(m.push("more"), "");
}

TEST(server_stop_matcher, ReleasesHeldTextWhenItIsNotAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ab ST"), "ab ");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");  // generation ended: the held text was not a stop after all
  EXPECT_FALSE(m.stopped());
}

TEST(server_stop_matcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  EXPECT_EQ(feed(m, {"hello world"}), "hel");
  StopMatcher overlap({"abc", "bcd"});
  EXPECT_EQ(feed(overlap, {"xab", "cd"}), "x");
}

TEST(server_stop_matcher, StopAtStartAndEmptyStopsIgnored) {
  StopMatcher m({"", "\n\n"});
  EXPECT_EQ(feed(m, {"\n", "\nrest"}), "");
  EXPECT_TRUE(m.stopped());
  StopMatcher only_empty({""});
  EXPECT_EQ(feed(only_empty, {"text"}), "text");
}

TEST(server_stop_matcher, HoldBackNeverSplitsUtf8) {
  // "é" is two bytes; the stop starts with it, so "é" is held whole, then released whole.
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(m.push("!"), "\xC3\xA9!");
  EXPECT_EQ(feed(m, {" \xC3\xA9t\xC3\xA9"}), " ");
}

TEST(server_stop_matcher, StopInsideOnePieceKeepsTextBefore) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.push("answer</s>tail"), "answer");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace hearth::server
