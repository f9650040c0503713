// hearth knobs: the environment variables Hearth reads, from their one declaration.
#include <cstdio>

#include "base/knobs.h"
#include "cli/flags.h"
#include "cli/verbs.h"

namespace hearth::cli {

int run_knobs(const std::vector<std::string>& args) {
  bool markdown = false;
  Flags f("knobs", "[--markdown]",
          "Lists the environment variables (knobs) Hearth reads, with defaults and current values.");
  f.add("markdown", "Print docs/knobs.md exactly.", &markdown);
  if (!f.parse(args)) return 0;
  if (markdown) {
    std::fputs(knobs_markdown().c_str(), stdout);
    return 0;
  }
  for (const KnobInfo& k : all_knobs()) {
    std::printf("%-16s = %-8s (default %s)\n    %s\n", std::string(k.env).c_str(), knob_text(k.env).c_str(),
                std::string(k.default_value).c_str(), std::string(k.help).c_str());
  }
  return 0;
}

}  // namespace hearth::cli
