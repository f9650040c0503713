// The parsed template: expression and statement nodes, each with its source position.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/value.h"

namespace hearth::chat {

enum class ExprKind : uint8_t {
  kLiteral,  // value
  kName,     // name
  kList,     // kids
  kTuple,    // kids
  kDict,     // kids: k0, v0, k1, v1, ...
  kAttr,     // kids[0].name
  kItem,     // kids[0][kids[1]]
  kSlice,    // kids[0][kids[1]:kids[2]:kids[3]] (null kids are omitted bounds)
  kCall,     // kids[0](args)
  kFilter,   // kids[0] | name(args); kids[0] null inside {% filter %}
  kTest,     // kids[0] is [not] name(args)
  kNot,      // not kids[0]
  kNeg,      // -kids[0]
  kPos,      // +kids[0]
  kBinary,   // kids[0] name kids[1]: + - * / // % ** ~ in
  kAnd,
  kOr,
  kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ...
  kCond,     // kids[0] if kids[1] else kids[2] (kids[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0, col = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> kids;
  std::vector<std::string> ops;
  // Calls, filters and tests: kids[1 .. 1+n_pos) are positional arguments, the rest keyword
  // arguments named by kw_names.
  size_t n_pos = 0;
  std::vector<std::string> kw_names;
  bool negated = false;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr, body, else_body (elif is a nested kIf)
  kFor,          // targets in expr [if cond], body, else_body
  kSet,          // targets = expr; or ns.attr = expr (attr non-empty)
  kSetBlock,     // targets[0] = rendered body [| filter chain in expr]
  kMacro,        // name(params = defaults): body
  kCallBlock,    // {% call(params) expr %} body
  kFilterBlock,  // body | filter chain in expr
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind;
  int line = 0, col = 0;
  std::string text;  // kText; kMacro: the macro name
  std::string attr;  // kSet of a namespace attribute
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
  std::vector<StmtPtr> body, else_body;
};

// Parses the token stream of tokenize(); throws TemplateError at the offending token.
std::vector<StmtPtr> parse_template(std::string_view source, const std::string& origin);

}  // namespace hearth::chat
