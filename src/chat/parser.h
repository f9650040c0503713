// The parser: jinja2/parser.py's grammar and precedence, recursive descent. Statements are
// parsed in parser.cpp, expressions in expr_parser.cpp.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/strings.h"
#include "chat/ast.h"
#include "chat/lexer.h"
#include "chat/template.h"

namespace hearth::chat {

constexpr int kMaxNesting = 200;  // expression and block nesting: bounds parser recursion

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin) : toks_(std::move(tokens)), origin_(origin) {}

  std::vector<StmtPtr> parse_all() {
    std::vector<StmtPtr> body;
    parse_body(body, {});
    if (cur().type != Tok::kEof) fail(cur(), "unexpected '" + printable(peek_name()) + "'");
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  std::string peek_name() const { return cur().type == Tok::kBlockBegin ? peek().text : cur().text; }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void fail(const Token& t, const std::string& problem) const {
    throw TemplateError(origin_, t.line, t.col, problem);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof: return "end of template";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kText: return "template text";
      default: return squote(printable(t.text, 40));
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail(cur(), "expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail(cur(), "expected end of statement block, got " + describe(cur()));
    next();
  }

  // A left-deep chain (a + b + c ..., x|f|g ..., a.b.c ...) nests the AST as deeply as real
  // nesting does, so each link counts against the same bound.
  struct ChainGuard {
    Parser* p;
    int n = 0;
    explicit ChainGuard(Parser* parser) : p(parser) {}
    void step(const Token& at) {
      ++n;
      if (++p->depth_ > kMaxNesting) p->fail(at, "template nested too deeply");
    }
    ~ChainGuard() { p->depth_ -= n; }
  };

  struct DepthGuard {
    Parser* p;
    DepthGuard(Parser* parser, const Token& at) : p(parser) {
      if (++p->depth_ > kMaxNesting) p->fail(at, "template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
  };

  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr make_stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Statements (parser.cpp).
  void parse_body(std::vector<StmtPtr>& out, const std::set<std::string>& ends);
  void expect_end_tag(const char* end);
  void parse_statement(std::vector<StmtPtr>& out);
  StmtPtr parse_if(const Token& at);
  void parse_params(Stmt& s);

  // Expressions (expr_parser.cpp).
  ExprPtr parse_filter_chain();
  ExprPtr parse_tuple(bool with_condexpr);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr binary(ExprKind kind, const Token& at, std::string op, ExprPtr l, ExprPtr r);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node, const Token& at);
  void parse_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr input);
  ExprPtr parse_filter_expr(ExprPtr node);

  std::vector<Token> toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
  int soft_depth_ = 0;
};

}  // namespace hearth::chat
