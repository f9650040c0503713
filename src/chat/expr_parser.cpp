// Expressions, from the conditional expression down to literals, by Jinja's precedence.
#include "chat/parser.h"
#include "chat/runtime.h"

namespace hearth::chat {

// `| f(args) | g` with no input (filter blocks, set blocks).
ExprPtr Parser::parse_filter_chain() {
  ExprPtr node;
  bool first = true;
  while (first || is_op("|")) {
    if (is_op("|")) next();
    first = false;
    node = parse_filter(std::move(node));
  }
  return node;
}

ExprPtr Parser::parse_tuple(bool with_condexpr) {
  const Token& at = cur();
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto t = make(ExprKind::kTuple, at);
  t->kids.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (cur().type == Tok::kBlockEnd || cur().type == Tok::kVarEnd || is_op(")") || is_name("in")) break;
    t->kids.push_back(parse_expression(with_condexpr));
  }
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(this, cur());
  if (!with_condexpr) return parse_or();
  ExprPtr node = parse_or();
  ChainGuard chain(this);
  while (is_name("if")) {
    chain.step(cur());
    const Token& at = next();
    auto c = make(ExprKind::kCond, at);
    ExprPtr cond = parse_or();
    ExprPtr other;
    if (is_name("else")) {
      next();
      other = parse_expression(true);
    }
    c->kids.push_back(std::move(node));
    c->kids.push_back(std::move(cond));
    c->kids.push_back(std::move(other));
    node = std::move(c);
  }
  return node;
}

ExprPtr Parser::binary(ExprKind kind, const Token& at, std::string op, ExprPtr l, ExprPtr r) {
  auto e = make(kind, at);
  e->name = std::move(op);
  e->kids.push_back(std::move(l));
  e->kids.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  ChainGuard chain(this);
  ExprPtr l = parse_and();
  while (is_name("or")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kOr, at, "or", std::move(l), parse_and());
  }
  return l;
}
ExprPtr Parser::parse_and() {
  ChainGuard chain(this);
  ExprPtr l = parse_not();
  while (is_name("and")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kAnd, at, "and", std::move(l), parse_not());
  }
  return l;
}
ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(this, cur());
    const Token& at = next();
    auto e = make(ExprKind::kNot, at);
    e->kids.push_back(parse_not());
    return e;
  }
  return parse_compare();
}
ExprPtr Parser::parse_compare() {
  ChainGuard chain(this);
  const Token& at = cur();
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    chain.step(cur());
    std::string op;
    if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                   cur().text == "<=" || cur().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(ExprKind::kCompare, at);
      cmp->kids.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->kids.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}
ExprPtr Parser::parse_math1() {
  ChainGuard chain(this);
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kBinary, at, at.text, std::move(l), parse_concat());
  }
  return l;
}
ExprPtr Parser::parse_concat() {
  ChainGuard chain(this);
  ExprPtr l = parse_math2();
  while (is_op("~")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kBinary, at, "~", std::move(l), parse_math2());
  }
  return l;
}
ExprPtr Parser::parse_math2() {
  ChainGuard chain(this);
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kBinary, at, at.text, std::move(l), parse_pow());
  }
  return l;
}
ExprPtr Parser::parse_pow() {
  ChainGuard chain(this);
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    chain.step(cur());
    const Token& at = next();
    l = binary(ExprKind::kBinary, at, "**", std::move(l), parse_unary(true));
  }
  return l;
}
ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(this, cur());
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& at = next();
    node = make(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
    node->kids.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.type == Tok::kName) {
    next();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      auto e = make(ExprKind::kLiteral, t);
      e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
      return e;
    }
    if (t.text == "none" || t.text == "None") {
      auto e = make(ExprKind::kLiteral, t);
      e->value = Value::none();
      return e;
    }
    auto e = make(ExprKind::kName, t);
    e->name = t.text;
    return e;
  }
  if (t.type == Tok::kString) {
    std::string s;
    while (cur().type == Tok::kString) s += next().text;
    auto e = make(ExprKind::kLiteral, t);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == Tok::kInt || t.type == Tok::kFloat) {
    next();
    auto e = make(ExprKind::kLiteral, t);
    e->value = t.type == Tok::kInt ? Value::integer(t.i) : Value::floating(t.f);
    return e;
  }
  if (is_op("(")) {
    next();
    if (is_op(")")) {
      next();
      return make(ExprKind::kTuple, t);
    }
    ExprPtr inner = parse_expression(true);
    if (is_op(",")) {
      auto tup = make(ExprKind::kTuple, t);
      tup->kids.push_back(std::move(inner));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        tup->kids.push_back(parse_expression(true));
      }
      inner = std::move(tup);
    }
    expect_op(")");
    return inner;
  }
  if (is_op("[")) {
    next();
    auto e = make(ExprKind::kList, t);
    while (!is_op("]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      e->kids.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = make(ExprKind::kDict, t);
    while (!is_op("}")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("}")) break;
      e->kids.push_back(parse_expression(true));
      expect_op(":");
      e->kids.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  fail(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  ChainGuard chain(this);
  while (true) {
    chain.step(cur());
    const Token& at = cur();
    if (is_op(".")) {
      next();
      if (cur().type == Tok::kInt) {
        auto e = make(ExprKind::kItem, at);
        auto idx = make(ExprKind::kLiteral, cur());
        idx->value = Value::integer(next().i);
        e->kids.push_back(std::move(node));
        e->kids.push_back(std::move(idx));
        node = std::move(e);
      } else {
        auto e = make(ExprKind::kAttr, at);
        e->name = expect_name();
        e->kids.push_back(std::move(node));
        node = std::move(e);
      }
    } else if (is_op("[")) {
      next();
      node = parse_subscript(std::move(node), at);
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node, const Token& at) {
  ExprPtr parts[3];
  int n_colons = 0;
  while (!is_op("]")) {
    if (is_op(":")) {
      if (++n_colons > 2) fail(cur(), "too many ':' in subscript");
      next();
    } else {
      if (parts[n_colons]) fail(cur(), "expected ']' or ':', got " + describe(cur()));
      parts[n_colons] = parse_expression(true);
    }
  }
  next();
  auto e = make(n_colons == 0 ? ExprKind::kItem : ExprKind::kSlice, at);
  e->kids.push_back(std::move(node));
  if (n_colons == 0) {
    if (!parts[0]) fail(at, "expected a subscript");
    e->kids.push_back(std::move(parts[0]));
  } else {
    for (auto& p : parts) e->kids.push_back(std::move(p));
  }
  return e;
}

// (args): positional first, then name=value.
void Parser::parse_args(Expr& e) {
  expect_op("(");
  std::vector<ExprPtr> kw;
  while (!is_op(")")) {
    if (e.kids.size() + kw.size() > 1) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs are not supported");
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
      e.kw_names.push_back(next().text);
      next();
      kw.push_back(parse_expression(true));
    } else {
      if (!kw.empty()) fail(cur(), "positional argument after keyword argument");
      e.kids.push_back(parse_expression(true));
      ++e.n_pos;
    }
  }
  next();
  for (auto& k : kw) e.kids.push_back(std::move(k));
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = make(ExprKind::kCall, cur());
  e->line = callee->line;  // errors point at what is called, not at its '('
  e->col = callee->col;
  e->kids.push_back(std::move(callee));
  parse_args(*e);
  return e;
}

ExprPtr Parser::parse_filter(ExprPtr input) {
  const Token& at = cur();
  auto e = make(ExprKind::kFilter, at);
  e->name = expect_name();
  if (!has_filter(e->name) && soft_depth_ == 0) fail(at, "no filter named '" + printable(e->name, 40) + "'");
  e->kids.push_back(std::move(input));
  if (is_op("(")) parse_args(*e);
  return e;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  ChainGuard chain(this);
  while (true) {
    chain.step(cur());
    if (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      next();
      const Token& at = cur();
      auto e = make(ExprKind::kTest, at);
      if (is_name("not")) {
        next();
        e->negated = true;
      }
      e->name = expect_name();
      if (!has_test(e->name) && soft_depth_ == 0) fail(at, "no test named '" + printable(e->name, 40) + "'");
      e->kids.push_back(std::move(node));
      const Token& c = cur();
      if (is_op("(")) {
        parse_args(*e);
      } else if ((c.type == Tok::kName || c.type == Tok::kString || c.type == Tok::kInt || c.type == Tok::kFloat ||
                  is_op("[") || is_op("{")) &&
                 !(is_name("else") || is_name("or") || is_name("and"))) {
        if (is_name("is")) fail(c, "You cannot chain multiple tests with is");
        e->kids.push_back(parse_postfix(parse_primary()));
        e->n_pos = 1;
      }
      node = std::move(e);
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

}  // namespace hearth::chat
