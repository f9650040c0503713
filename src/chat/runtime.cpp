// The tree-walking interpreter: statements write into an output string, expressions yield
// Values. Scoping follows Jinja: for loops and macros get their own frame, `set` writes to the
// innermost one, and namespace() objects carry state out of loops.
#include "chat/runtime.h"

#include <memory>
#include <unordered_map>

#include "base/strings.h"
#include "chat/template.h"

namespace hearth::chat {
namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// Namespaces are the only mutable values; keeping them out of each other rules out cycles and
// chains too long to destroy recursively. No real template nests them.
const Value& checked_for_namespace(const Value& v) {
  if (v.holds_namespace) throw EvalError("a namespace attribute cannot hold a namespace");
  return v;
}

class Interp {
 public:
  Interp(const std::string& origin, const std::function<std::tm()>& now, const Limits& limits)
      : origin_(origin), now_(now), limits_(limits) {}

  std::string run(const std::vector<StmtPtr>& body, const Value& vars) {
    auto globals = std::make_shared<Frame>();
    add_globals(*globals);
    auto root = std::make_shared<Frame>();
    root->parent = globals;
    if (vars.is_dict()) {
      for (const auto& [k, v] : vars.dict->items) {
        if (k.is_string()) root->vars[k.s] = v;
      }
    }
    root_ = root;
    std::string out;
    exec_block(body, root, out);
    return out;
  }

 private:
  [[noreturn]] void fail(int line, int col, const std::string& problem) const {
    throw TemplateError(origin_, line, col, problem);
  }

  void add_globals(Frame& g) {
    g.vars["raise_exception"] = Value::callable("raise_exception", [](const CallArgs& a) -> Value {
      throw EvalError("raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    g.vars["strftime_now"] = Value::callable("strftime_now", [this](const CallArgs& a) {
      const Value* fmt = a.get("format", 0);
      if (fmt == nullptr || !fmt->is_string()) throw EvalError("strftime_now expected a format string");
      std::tm tm{};
      if (now_) {
        tm = now_();
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      char buf[512];
      const size_t n = fmt->s.empty() ? 0 : std::strftime(buf, sizeof buf, fmt->s.c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
    g.vars["range"] = Value::callable("range", [this](const CallArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      auto num = [](const Value& v) {
        if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) {
          throw EvalError(squote(type_name(v)) + " object cannot be interpreted as an integer");
        }
        return v.kind == Value::Kind::kBool ? int64_t(v.b) : v.i;
      };
      if (a.pos.size() == 1) {
        stop = num(a.pos[0]);
      } else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = num(a.pos[0]);
        stop = num(a.pos[1]);
        if (a.pos.size() == 3) step = num(a.pos[2]);
      } else {
        throw EvalError("range expected 1 to 3 arguments");
      }
      if (step == 0) throw EvalError("range() arg 3 must not be zero");
      const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
      const __int128 count =
          span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
      if (count > limits_.max_loop_iterations) throw EvalError("range too large");
      List items;
      items.reserve(size_t(count));
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        items.push_back(Value::integer(i));
      }
      return Value::make_list(std::move(items));
    });
    g.vars["namespace"] = Value::callable("namespace", [](const CallArgs& a) {
      Value v;
      v.kind = Value::Kind::kNamespace;
      v.holds_namespace = true;
      v.ns = std::make_shared<Dict>();
      for (const Value& p : a.pos) {
        if (!p.is_dict()) throw EvalError("namespace() positional argument must be a dict");
        for (const auto& [k, e] : p.dict->items) v.ns->set(k, checked_for_namespace(e));
      }
      for (const auto& [k, e] : a.kw) v.ns->set(Value::string(k), checked_for_namespace(e));
      return v;
    });
    g.vars["dict"] = Value::callable("dict", [](const CallArgs& a) {
      Dict d;
      for (const Value& p : a.pos) {
        if (!p.is_dict()) throw EvalError("dict() positional argument must be a dict");
        for (const auto& [k, e] : p.dict->items) d.set(k, e);
      }
      for (const auto& [k, e] : a.kw) d.set(Value::string(k), e);
      return Value::make_dict(std::move(d));
    });
  }

  void emit(std::string& out, std::string_view text, int line, int col) {
    out += text;
    if (out.size() > limits_.max_output_bytes) fail(line, col, "output larger than the render limit");
  }

  Flow exec_block(const std::vector<StmtPtr>& body, const FramePtr& frame, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, frame, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText: emit(out, s.text, s.line, s.col); return Flow::kNormal;
      case StmtKind::kOutput: emit(out, to_str(eval(*s.expr, frame)), s.line, s.col); return Flow::kNormal;
      case StmtKind::kIf: return exec_block(truthy(eval(*s.expr, frame)) ? s.body : s.else_body, frame, out);
      case StmtKind::kFor: return exec_for(s, frame, out);
      case StmtKind::kSet: {
        Value v = eval(*s.expr, frame);
        if (!s.attr.empty()) {
          const Value* target = frame->lookup(s.targets[0]);
          if (target == nullptr || target->kind != Value::Kind::kNamespace) {
            fail(s.line, s.col, "cannot assign attribute on non-namespace object");
          }
          if (v.holds_namespace) fail(s.line, s.col, "a namespace attribute cannot hold a namespace");
          target->ns->set(Value::string(s.attr), std::move(v));
        } else {
          assign(s, s.targets, v, *frame);
        }
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        std::string text;
        exec_block(s.body, frame, text);
        Value v = Value::string(std::move(text));
        if (s.expr) v = apply_chain(*s.expr, v, frame);
        frame->vars[s.targets[0]] = std::move(v);
        return Flow::kNormal;
      }
      case StmtKind::kMacro: frame->vars[s.text] = make_macro(s, frame, s.text); return Flow::kNormal;
      case StmtKind::kCallBlock: {
        Value caller = make_macro(s, frame, "caller");
        const Expr& call = *s.expr;
        CallArgs args = eval_args(call, frame);
        args.kw.emplace_back("caller", caller);
        const Value callee = eval(*call.kids[0], frame);
        emit(out, to_str(invoke(callee, args, call)), s.line, s.col);
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string text;
        exec_block(s.body, frame, text);
        emit(out, to_str(apply_chain(*s.expr, Value::string(std::move(text)), frame)), s.line, s.col);
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& s, const std::vector<std::string>& targets, const Value& v, Frame& frame) {
    if (targets.size() == 1) {
      frame.vars[targets[0]] = v;
      return;
    }
    std::vector<Value> items;
    try {
      items = iterate(v);
    } catch (const EvalError& e) {
      fail(s.line, s.col, std::string("cannot unpack: ") + e.what());
    }
    if (items.size() != targets.size()) {
      fail(s.line, s.col,
           "expected " + std::to_string(targets.size()) + " values to unpack, got " + std::to_string(items.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) frame.vars[targets[i]] = items[i];
  }

  // The filter chain of a {% filter %} or {% set x | f %} block, innermost first.
  Value apply_chain(const Expr& e, const Value& input, const FramePtr& frame) {
    Value v = e.kids[0] ? apply_chain(*e.kids[0], input, frame) : input;
    try {
      return apply_filter(e.name, v, eval_args(e, frame));
    } catch (const EvalError& err) {
      fail(e.line, e.col, err.what());
    }
  }

  Flow exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
    const Value seq = eval(*s.expr, frame);
    std::vector<Value> items;
    try {
      items = iterate(seq);
    } catch (const EvalError& err) {
      fail(s.expr->line, s.expr->col, err.what());
    }
    auto cond_frame = std::make_shared<Frame>();
    cond_frame->parent = frame;
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        assign(s, s.targets, item, *cond_frame);
        if (truthy(eval(*s.cond, cond_frame))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_block(s.else_body, frame, out);
    const int64_t n = int64_t(items.size());
    // One loop object, updated in place while nobody else holds it (a template that stores
    // `loop` somewhere gets a fresh copy for the next iteration).
    auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::callable("cycle", [index](const CallArgs& a) {
      if (a.pos.empty()) throw EvalError("no items for cycling given");
      return a.pos[size_t(*index) % a.pos.size()];
    });
    std::shared_ptr<Dict> loop;
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > limits_.max_loop_iterations) fail(s.line, s.col, "loop iteration limit exceeded");
      // Each iteration has its own scope: a `set` in the body is gone by the next one (Jinja).
      auto iter_frame = std::make_shared<Frame>();
      iter_frame->parent = frame;
      assign(s, s.targets, items[size_t(i)], *iter_frame);
      *index = i;
      if (!loop || loop.use_count() > 1) {  // the last iteration's `loop` was kept somewhere
        loop = std::make_shared<Dict>();
        for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                              "previtem", "nextitem", "cycle"}) {
          loop->items.emplace_back(Value::string(k), Value());
        }
      }
      Value loop_value;
      loop_value.kind = Value::Kind::kDict;
      loop_value.depth = Value::kMaxDepth;  // holds arbitrary items: counted as deep and as
      loop_value.holds_namespace = true;    // namespace-holding as they may be
      loop_value.dict = loop;
      iter_frame->vars["loop"] = std::move(loop_value);
      auto& e = loop->items;
      e[0].second = Value::integer(i + 1);
      e[1].second = Value::integer(i);
      e[2].second = Value::integer(n - i);
      e[3].second = Value::integer(n - i - 1);
      e[4].second = Value::boolean(i == 0);
      e[5].second = Value::boolean(i == n - 1);
      e[6].second = Value::integer(n);
      e[7].second = Value::integer(1);
      e[8].second = Value::integer(0);
      e[9].second = i > 0 ? items[size_t(i - 1)] : Value::undefined("'previtem' is undefined");
      e[10].second = i + 1 < n ? items[size_t(i + 1)] : Value::undefined("'nextitem' is undefined");
      e[11].second = cycle;
      const Flow f = exec_block(s.body, iter_frame, out);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Stmt& s, const FramePtr& frame, const std::string& name) {
    std::weak_ptr<Frame> def = frame;  // weak: the frame holds the macro
    return Value::callable(name, [this, &s, def](const CallArgs& a) { return call_macro(s, def.lock(), a); });
  }

  Value call_macro(const Stmt& m, FramePtr def, const CallArgs& a) {
    if (++call_depth_ > limits_.max_call_depth) {
      --call_depth_;
      throw EvalError("maximum macro recursion depth exceeded");
    }
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{call_depth_};
    auto frame = std::make_shared<Frame>();
    frame->parent = def ? def : root_.lock();
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Value* v = i < a.pos.size() ? &a.pos[i] : nullptr;
      for (const auto& [k, kv] : a.kw) {
        if (k == m.params[i]) v = &kv;
      }
      if (v) {
        frame->vars[m.params[i]] = *v;
      } else if (m.defaults[i]) {
        frame->vars[m.params[i]] = eval(*m.defaults[i], frame);
      } else {
        frame->vars[m.params[i]] = Value::undefined(squote(m.params[i]) + " is undefined");
      }
    }
    List varargs(a.pos.size() > m.params.size() ? a.pos.begin() + long(m.params.size()) : a.pos.end(), a.pos.end());
    frame->vars["varargs"] = Value::make_list(std::move(varargs));
    Dict kwargs;
    for (const auto& [k, kv] : a.kw) {
      if (k == "caller") {
        frame->vars["caller"] = kv;
      } else if (std::find(m.params.begin(), m.params.end(), k) == m.params.end()) {
        kwargs.set(Value::string(k), kv);
      }
    }
    frame->vars["kwargs"] = Value::make_dict(std::move(kwargs));
    std::string text;
    exec_block(m.body, frame, text);
    return Value::string(std::move(text));
  }

  CallArgs eval_args(const Expr& e, const FramePtr& frame) {
    CallArgs args;
    for (size_t i = 1; i < e.kids.size(); ++i) {
      Value v = eval(*e.kids[i], frame);
      if (i - 1 < e.n_pos) {
        args.pos.push_back(std::move(v));
      } else {
        args.kw.emplace_back(e.kw_names[i - 1 - e.n_pos], std::move(v));
      }
    }
    return args;
  }

  Value invoke(const Value& callee, const CallArgs& args, const Expr& at) {
    if (callee.kind != Value::Kind::kCallable) {
      if (callee.is_undefined()) fail(at.line, at.col, callee.s.empty() ? "value is undefined" : callee.s);
      fail(at.line, at.col, squote(type_name(callee)) + " object is not callable");
    }
    try {
      return callee.fn->fn(args);
    } catch (const EvalError& err) {
      fail(at.line, at.col, err.what());
    }
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    // Expressions inside macros inside expressions...: bounds the C++ stack, whatever nests.
    if (++eval_depth_ > limits_.max_eval_depth) {
      --eval_depth_;
      fail(e.line, e.col, "template nested too deeply at run time");
    }
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{eval_depth_};
    try {
      return eval_inner(e, frame);
    } catch (const EvalError& err) {
      fail(e.line, e.col, err.what());
    }
  }

  Value eval_inner(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: {
        const Value* v = frame->lookup(e.name);
        return v ? *v : Value::undefined(squote(printable(e.name, 60)) + " is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& k : e.kids) items.push_back(eval(*k, frame));
        return Value::make_list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) d.set(eval(*e.kids[i], frame), eval(*e.kids[i + 1], frame));
        return Value::make_dict(std::move(d));
      }
      case ExprKind::kAttr: return get_attr(eval(*e.kids[0], frame), e.name);
      case ExprKind::kItem: return get_item(eval(*e.kids[0], frame), eval(*e.kids[1], frame));
      case ExprKind::kSlice: {
        const Value obj = eval(*e.kids[0], frame);
        Value parts[3];
        const Value* ptrs[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k) {
          if (e.kids[size_t(k) + 1]) {
            parts[k] = eval(*e.kids[size_t(k) + 1], frame);
            ptrs[k] = &parts[k];
          }
        }
        return get_slice(obj, ptrs[0], ptrs[1], ptrs[2]);
      }
      case ExprKind::kCall: {
        const Value callee = eval(*e.kids[0], frame);
        return invoke(callee, eval_args(e, frame), e);
      }
      case ExprKind::kFilter: {
        const Value input = eval(*e.kids[0], frame);
        return apply_filter(e.name, input, eval_args(e, frame));
      }
      case ExprKind::kTest: {
        const Value v = eval(*e.kids[0], frame);
        return Value::boolean(apply_test(e.name, v, eval_args(e, frame)) != e.negated);
      }
      case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.kids[0], frame)));
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        const Value v = eval(*e.kids[0], frame);
        if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool) {
          const int64_t i = v.kind == Value::Kind::kBool ? v.b : v.i;
          if (e.kind == ExprKind::kNeg && i == INT64_MIN) throw EvalError("integer overflow");
          return Value::integer(e.kind == ExprKind::kNeg ? -i : i);
        }
        if (v.kind == Value::Kind::kFloat) return Value::floating(e.kind == ExprKind::kNeg ? -v.f : v.f);
        if (v.is_undefined()) throw EvalError(v.s.empty() ? "value is undefined" : v.s);
        throw EvalError("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" +
                        type_name(v) + "'");
      }
      case ExprKind::kBinary:
        return binary_op(e.name, eval(*e.kids[0], frame), eval(*e.kids[1], frame), limits_.max_output_bytes);
      case ExprKind::kAnd: {
        Value l = eval(*e.kids[0], frame);
        return truthy(l) ? eval(*e.kids[1], frame) : l;
      }
      case ExprKind::kOr: {
        Value l = eval(*e.kids[0], frame);
        return truthy(l) ? l : eval(*e.kids[1], frame);
      }
      case ExprKind::kCompare: {
        Value l = eval(*e.kids[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.kids[i + 1], frame);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") {
            ok = equals(l, r);
          } else if (op == "!=") {
            ok = !equals(l, r);
          } else if (op == "<") {
            ok = less(l, r);
          } else if (op == ">") {
            ok = less(r, l);
          } else if (op == "<=") {
            ok = !less(r, l);
          } else if (op == ">=") {
            ok = !less(l, r);
          } else if (op == "in") {
            ok = contains(r, l);
          } else {
            ok = !contains(r, l);
          }
          if (!ok) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCond:
        if (truthy(eval(*e.kids[1], frame))) return eval(*e.kids[0], frame);
        return e.kids[2] ? eval(*e.kids[2], frame) : Value::undefined("conditional expression had no else");
    }
    return Value();
  }

  const std::string& origin_;
  const std::function<std::tm()>& now_;
  Limits limits_;
  std::weak_ptr<Frame> root_;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace

std::string render_template(const std::vector<StmtPtr>& body, const Value& vars, const std::string& origin,
                            const std::function<std::tm()>& now, const Limits& limits) {
  return Interp(origin, now, limits).run(body, vars);
}

}  // namespace hearth::chat
