// The template language feature by feature. Expected outputs of tests/data/chat/language_cases.json
// come from Jinja2 (scripts/fixtures/jinja_references.py); the rest checks our own contract:
// error positions, limits, and that bad templates raise TemplateError instead of crashing.
#include "chat/template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/mapped_file.h"
#include "test_util.h"

namespace hearth {
namespace {

using json = nlohmann::ordered_json;

std::tm fixed_now() {  // 2025-07-26 14:30:05, as the reference script fixes strftime_now
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  const std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

std::string render(const std::string& source, const json& ctx = json::object()) {
  ChatTemplate t = ChatTemplate::parse(source, "t");
  t.set_clock(fixed_now);
  return t.render(ctx);
}

// The message of the TemplateError that parsing or rendering `source` raises ("" if none).
std::string error_of(const std::string& source, const json& ctx = json::object()) {
  try {
    render(source, ctx);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "";
}

TEST(chat_Language, MatchesJinja2) {
  const json data = json::parse(read_text_file(testing::data_path("chat/language_cases.json")));
  int n = 0;
  for (const json& c : data.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string source = c.at("template").get<std::string>();
    SCOPED_TRACE(name + ": " + source);
    if (c.contains("error")) {
      EXPECT_NE(error_of(source, data.at("context")), "") << "Jinja2: " << c["error"];
    } else {
      try {
        EXPECT_EQ(render(source, data.at("context")), c.at("rendered").get<std::string>());
      } catch (const TemplateError& e) {
        ADD_FAILURE() << e.what();
      }
    }
    ++n;
  }
  EXPECT_GE(n, 50);
}

TEST(chat_Language, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("ok\n{% if x %}\nno end"), "t:3:7: unexpected end of template, expected 'elif'");
  EXPECT_EQ(error_of("{{ 1 + }}"), "t:1:8: unexpected end of print statement");
  EXPECT_EQ(error_of("a\n  {% frobnicate %}"), "t:2:6: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}"), "t:1:8: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("{{ x is nosuchtest }}"), "t:1:9: no test named 'nosuchtest'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "t:1:4: unterminated string literal");
  EXPECT_EQ(error_of("{# never closed"), "t:1:1: unterminated comment");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}"), "t:1:20: unknown tag 'endif'");
  EXPECT_EQ(error_of("{{ a ) }}"), "t:1:6: unexpected ')'");
}

TEST(chat_Language, RuntimeErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("line one\n  {{- raise_exception('Only user and assistant roles') }}"),
            "t:2:7: raise_exception: Only user and assistant roles");
  EXPECT_EQ(error_of("{{ missing.attr }}"), "t:1:11: 'missing' is undefined");
  EXPECT_EQ(error_of("{{ nothere() }}"), "t:1:4: 'nothere' is undefined");
  EXPECT_EQ(error_of("\n\n{{ 'a' + 1 }}"), "t:3:8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{% for x in none %}{% endfor %}"), "t:1:13: 'NoneType' object is not iterable");
  EXPECT_EQ(error_of("{% if x %}{{ y | nosuch }}{% endif %}", {{"x", true}}), "t:1:18: no filter named 'nosuch'");
  EXPECT_EQ(error_of("{% if x %}{{ y | nosuch }}{% endif %}", {{"x", false}}), "");  // Jinja checks lazily in if
  EXPECT_NE(error_of("{% set l = [] %}{{ l.append(1) }}"), "");                      // immutable sandbox
}

TEST(chat_Language, UndefinedSemantics) {
  EXPECT_EQ(render("[{{ x }}][{{ x is defined }}][{{ x | default('d') }}][{{ not x }}]"), "[][False][d][True]");
  EXPECT_EQ(render("{{ m.role }}|{{ m.nope }}|{{ m['nope'] is defined }}", {{"m", {{"role", "user"}}}}), "user||False");
  EXPECT_NE(error_of("{{ m.nope.deeper }}", {{"m", json::object()}}), "");  // attribute of undefined raises
  EXPECT_EQ(render("{{ tools is none }}{{ tools is defined }}", {{"tools", nullptr}}), "TrueTrue");
}

TEST(chat_Language, ContextKeyOrderFollowsOrderedJson) {
  ChatTemplate t = ChatTemplate::parse("{{ d | tojson }}");
  EXPECT_EQ(t.render(json::parse(R"({"d": {"z": 1, "a": "é"}})")), R"({"z": 1, "a": "é"})");
  EXPECT_EQ(t.render(nlohmann::json::parse(R"({"d": {"z": 1, "a": 2}})")), R"({"a": 2, "z": 1})");
}

TEST(chat_Language, LimitsRaiseInsteadOfCrashing) {
  // Unbounded macro recursion.
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("recursion"), std::string::npos);
  // Huge loops and outputs.
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), "");
  EXPECT_NE(error_of("{% for i in range(1000000000000) %}{% endfor %}"), "");
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}"), "");
  EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "");
  // Deep nesting in the source.
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '[')), "");
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs), "");
  EXPECT_NE(error_of("{{ " + std::string(5000, '-') + "1 }}"), "");
  const auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  EXPECT_NE(error_of("{{ x" + repeat("|trim", 5000) + " }}"), "");
  EXPECT_NE(error_of("{{ 1" + repeat(" + 1", 5000) + " }}"), "");
  EXPECT_NE(error_of("{{ a" + repeat(".b", 5000) + " }}"), "");
  EXPECT_NE(error_of("{{ " + repeat("not ", 5000) + "1 }}"), "");
  EXPECT_NE(error_of("{% if a %}" + repeat("{% elif a %}", 5000) + "{% endif %}"), "");
  // Recursion through macros with deep expressions inside.
  EXPECT_NE(
      error_of("{% macro f(n) %}{{ [[[[[[[[[[f(n + 1)]]]]]]]]]] }}{% endmacro %}{{ f(0) }}").find("nested too deeply"),
      std::string::npos);
  // Values: deep nesting built by the template, namespaces inside namespaces, deep contexts.
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
            "");
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set t = namespace() %}{% set ns.x = [t] %}"), "");
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_EQ(error_of("{{ x }}", {{"x", deep}}), "t:1:1: context nested too deeply");
  EXPECT_NE(error_of("{{ 99999999999999999999999 }}"), "");
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}"), "");
}

TEST(chat_Language, HostileInputsNeverCrash) {
  const char* const kBad[] = {
      "{{",          "{%",           "{% if %}",    "{{ x[ }}",         "{{ x. }}",
      "{% for %}",   "{% set %}",    "{{ ) }}",     "{% macro %}",      "{{ 'a' | }}",
      "{{ x is }}",  "{% endfor %}", "{{ {1: } }}", "{{ x(1=2) }}",     "{% call %}{% endcall %}",
      "{{ '\\x' }}", "{% raw %}",    "{{ 1 if }}",  "{{ [1,2][::0] }}", "{{ range(1, 2, 0) }}"};
  for (const char* src : kBad) EXPECT_NE(error_of(src), "") << src;
}

}  // namespace
}  // namespace hearth
