// Stop strings on decoded text. Text that might be the start of a stop string is held back
// until it is known not to be, so a client never sees part of a stop sequence; the stop
// string itself is never emitted (as mlx_lm.server and OpenAI do).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

class StopMatcher {
 public:
  // Empty strings are ignored (they would match everywhere).
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds newly decoded text; returns the text that is safe to emit now. Once a stop string
  // is found, stopped() is true, the returned text ends just before it, and later calls
  // return "".
  std::string push(std::string_view text);
  // Generation ended without a stop: returns the text still held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string found (the longest of those starting at the earliest position).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // never contains a whole stop string
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace hearth::server
