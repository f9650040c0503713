#include "base/knobs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "base/error.h"

namespace hearth {
namespace {

TEST(Knobs, OverrideIsScopedAndRestored) {
  const std::string before = knob_text("HEARTH_ISA");
  {
    const KnobOverride o("HEARTH_ISA", "scalar");
    EXPECT_EQ(knobs::isa(), "scalar");
    {
      const KnobOverride inner("HEARTH_ISA", "avx2");
      EXPECT_EQ(knobs::isa(), "avx2");
    }
    EXPECT_EQ(knobs::isa(), "scalar");
  }
  EXPECT_EQ(knob_text("HEARTH_ISA"), before);
}

TEST(Knobs, UndeclaredKnobIsAnError) { EXPECT_THROW(knob_text("HEARTH_NOPE"), InputError); }

TEST(Knobs, BadThreadCountIsAnError) {
  const KnobOverride o("HEARTH_THREADS", "many");
  EXPECT_THROW(knobs::threads(), InputError);
}

TEST(Knobs, FlagsAreZeroOrOne) {
  const std::pair<const char*, bool (*)()> flags[] = {{"HEARTH_DEVICE_GRAPHS", knobs::device_graphs},
                                                      {"HEARTH_CUDA_PDL", knobs::cuda_pdl},
                                                      {"HEARTH_CUDA_QUANT_GEMM", knobs::cuda_quant_gemm}};
  for (const auto& [env, read] : flags) {
    {
      const KnobOverride o(env, "0");
      EXPECT_FALSE(read()) << env;
    }
    const KnobOverride o(env, "yes");
    try {
      (void)read();
      ADD_FAILURE() << env << "=yes was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(env), std::string::npos) << e.what();
    }
  }
}

// The flags that hot paths read per call are cached; an override and its end are seen at once.
TEST(Knobs, CachedFlagsFollowOverrides) {
  const std::pair<const char*, bool (*)()> flags[] = {{"HEARTH_DEVICE_GRAPHS", knobs::device_graphs},
                                                      {"HEARTH_CUDA_QUANT_GEMM", knobs::cuda_quant_gemm}};
  for (const auto& [env, read] : flags) {
    const bool outside = knob_text(env) == "1";
    EXPECT_EQ(read(), outside) << env;
    EXPECT_EQ(read(), outside) << env;
    {
      const KnobOverride o(env, outside ? "0" : "1");
      EXPECT_EQ(read(), !outside) << env;
      EXPECT_EQ(read(), !outside) << env;
    }
    EXPECT_EQ(read(), outside) << env;
  }
}

// docs/knobs.md is generated from the declarations (`hearth knobs --markdown`).
TEST(Knobs, DocsAreInSync) {
  std::ifstream in(std::string(HEARTH_SOURCE_DIR) + "/docs/knobs.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), knobs_markdown()) << "regenerate with: build/hearth knobs --markdown > docs/knobs.md";
}

}  // namespace
}  // namespace hearth
