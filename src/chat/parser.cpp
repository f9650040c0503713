// Statements: the template body, tags and their blocks.
#include "chat/parser.h"

namespace hearth::chat {

// Parses statements until a {% name %} with name in `ends` (left unconsumed) or the end.
void Parser::parse_body(std::vector<StmtPtr>& out, const std::set<std::string>& ends) {
  DepthGuard guard(this, cur());
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::kEof) {
      if (!ends.empty()) fail(t, "unexpected end of template, expected '" + *ends.begin() + "'");
      return;
    }
    if (t.type == Tok::kText) {
      auto s = make_stmt(StmtKind::kText, t);
      s->text = t.text;
      out.push_back(std::move(s));
      next();
    } else if (t.type == Tok::kVarBegin) {
      next();
      auto s = make_stmt(StmtKind::kOutput, t);
      s->expr = parse_tuple(true);
      if (cur().type != Tok::kVarEnd) fail(cur(), "expected end of print statement, got " + describe(cur()));
      next();
      out.push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      const Token& name = peek();
      if (name.type != Tok::kName) fail(name, "expected a statement name, got " + describe(name));
      if (ends.count(name.text)) return;
      next();
      parse_statement(out);
    } else {
      fail(t, "unexpected " + describe(t));
    }
  }
}

// Consumes {% end %} where `end` is the expected closing tag.
void Parser::expect_end_tag(const char* end) {
  next();  // BlockBegin
  if (!is_name(end)) fail(cur(), std::string("expected '") + end + "'");
  next();
  expect_block_end();
}

void Parser::parse_statement(std::vector<StmtPtr>& out) {
  const Token& at = cur();
  const std::string word = next().text;
  if (word == "if") {
    // Jinja checks filter and test names at compile time, except inside an if (a "soft"
    // frame), where an unknown name fails only when evaluated.
    ++soft_depth_;
    out.push_back(parse_if(at));
    --soft_depth_;
  } else if (word == "for") {
    auto s = make_stmt(StmtKind::kFor, at);
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
    next();
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      next();
      s->cond = parse_expression(true);
    }
    if (is_name("recursive")) fail(cur(), "recursive loops are not supported");
    expect_block_end();
    parse_body(s->body, {"endfor", "else"});
    if (peek().text == "else") {
      next();
      next();
      expect_block_end();
      parse_body(s->else_body, {"endfor"});
    }
    expect_end_tag("endfor");
    out.push_back(std::move(s));
  } else if (word == "set") {
    auto s = make_stmt(StmtKind::kSet, at);
    s->targets.push_back(expect_name());
    if (is_op(".")) {
      next();
      s->attr = expect_name();
    }
    while (is_op(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (is_op("=")) {
      next();
      s->expr = parse_tuple(true);
      expect_block_end();
    } else {
      if (!s->attr.empty() || s->targets.size() != 1) fail(cur(), "expected '='");
      s->kind = StmtKind::kSetBlock;
      if (is_op("|")) s->expr = parse_filter_chain();
      expect_block_end();
      parse_body(s->body, {"endset"});
      expect_end_tag("endset");
    }
    out.push_back(std::move(s));
  } else if (word == "macro") {
    auto s = make_stmt(StmtKind::kMacro, at);
    s->text = expect_name();
    parse_params(*s);
    expect_block_end();
    parse_body(s->body, {"endmacro"});
    expect_end_tag("endmacro");
    out.push_back(std::move(s));
  } else if (word == "call") {
    auto s = make_stmt(StmtKind::kCallBlock, at);
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail(at, "expected a call after 'call'");
    expect_block_end();
    parse_body(s->body, {"endcall"});
    expect_end_tag("endcall");
    out.push_back(std::move(s));
  } else if (word == "filter") {
    auto s = make_stmt(StmtKind::kFilterBlock, at);
    s->expr = parse_filter_chain();
    expect_block_end();
    parse_body(s->body, {"endfilter"});
    expect_end_tag("endfilter");
    out.push_back(std::move(s));
  } else if (word == "generation") {
    // transformers' AssistantTracker: renders its body as is.
    expect_block_end();
    parse_body(out, {"endgeneration"});
    expect_end_tag("endgeneration");
  } else if (word == "break" || word == "continue") {
    out.push_back(make_stmt(word == "break" ? StmtKind::kBreak : StmtKind::kContinue, at));
    expect_block_end();
  } else {
    fail(at, "unknown tag '" + printable(word, 40) + "'");
  }
}

StmtPtr Parser::parse_if(const Token& at) {
  DepthGuard guard(this, at);  // each elif nests one level
  auto s = make_stmt(StmtKind::kIf, at);
  s->expr = parse_tuple(true);
  expect_block_end();
  parse_body(s->body, {"elif", "else", "endif"});
  const Token& tag = peek();
  if (tag.text == "elif") {
    next();
    next();
    s->else_body.push_back(parse_if(tag));  // consumes through endif
    return s;
  }
  if (tag.text == "else") {
    next();
    next();
    expect_block_end();
    parse_body(s->else_body, {"endif"});
  }
  expect_end_tag("endif");
  return s;
}

void Parser::parse_params(Stmt& s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s.params.empty()) expect_op(",");
    if (is_op(")")) break;
    s.params.push_back(expect_name());
    if (is_op("=")) {
      next();
      s.defaults.push_back(parse_expression(true));
    } else {
      s.defaults.push_back(nullptr);
    }
  }
  next();
}

std::vector<StmtPtr> parse_template(std::string_view source, const std::string& origin) {
  return Parser(tokenize(source, origin), origin).parse_all();
}

}  // namespace hearth::chat
