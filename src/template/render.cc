#include "template/render.h"

#include <cmath>

#include "template/builtins.h"
#include "template/py_str.h"

namespace hiq::jinja {
namespace {

[[noreturn]] void type_error(const std::string& message) { throw TemplateError(message); }

[[noreturn]] void fail_undefined(const Value& v) { throw TemplateError(v.undefined_message()); }

const char* op_symbol(Expr::Op op) {
  switch (op) {
    case Expr::Op::kAdd: return "+";
    case Expr::Op::kSub: return "-";
    case Expr::Op::kMul: return "*";
    case Expr::Op::kDiv: return "/";
    case Expr::Op::kFloorDiv: return "//";
    case Expr::Op::kMod: return "%";
    case Expr::Op::kPow: return "**";
    case Expr::Op::kConcat: return "~";
    case Expr::Op::kEq: return "==";
    case Expr::Op::kNe: return "!=";
    case Expr::Op::kLt: return "<";
    case Expr::Op::kGt: return ">";
    case Expr::Op::kLe: return "<=";
    case Expr::Op::kGe: return ">=";
    case Expr::Op::kIn: return "in";
    case Expr::Op::kNotIn: return "not in";
  }
  return "?";
}

[[noreturn]] void unsupported_operands(Expr::Op op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  type_error(std::string("unsupported operand types for ") + op_symbol(op) + ": '" + a.type_name() + "' and '" +
             b.type_name() + "'");
}

// a op b on 64-bit integers; Python's are unbounded, so overflow is an error here.
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) type_error("integer overflow (Python integers are unbounded; these are 64-bit)");
  return r;
}
constexpr auto kAddOverflow = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
constexpr auto kSubOverflow = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
constexpr auto kMulOverflow = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };

int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) type_error("integer overflow (Python integers are unbounded; these are 64-bit)");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t times, const Renderer& renderer) {
  if (times <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    renderer.check_size(s.size() * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX)));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list();
  renderer.check_size(items.size() * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX)));
  Value::List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

// "%s and %d" % (a, b): the conversions chat templates might use.
Value percent_format(const std::string& format, const Value& args) {
  Value::List values = args.is_tuple() ? args.as_list() : Value::List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) type_error("incomplete format");
    const char c = format[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) type_error("not enough arguments for format string");
    const Value& v = values[next++];
    if (c == 's') {
      out += v.str();
    } else if (c == 'r') {
      out += v.repr();
    } else if (c == 'd' || c == 'i') {
      if (!v.is_number()) type_error("%d format: a real number is required, not " + v.type_name());
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int());
    } else {
      type_error(std::string("the format conversion '%") + c + "' is not supported");
    }
  }
  if (next < values.size()) type_error("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

}  // namespace

Value binary_operation(Expr::Op op, const Value& a, const Value& b, const Renderer& renderer) {
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  switch (op) {
    case Expr::Op::kAdd:
      if (floats) return Value::floating(a.as_float() + b.as_float());
      if (numbers) return Value::integer(checked(kAddOverflow, a.as_int(), b.as_int()));
      if (a.is_string() && b.is_string()) {
        renderer.check_size(a.as_string().size() + b.as_string().size());
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        renderer.check_size(a.as_list().size() + b.as_list().size());
        Value::List items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items), a.is_tuple());
      }
      break;
    case Expr::Op::kSub:
      if (floats) return Value::floating(a.as_float() - b.as_float());
      if (numbers) return Value::integer(checked(kSubOverflow, a.as_int(), b.as_int()));
      break;
    case Expr::Op::kMul:
      if (floats) return Value::floating(a.as_float() * b.as_float());
      if (numbers) return Value::integer(checked(kMulOverflow, a.as_int(), b.as_int()));
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), renderer);
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), renderer);
      break;
    case Expr::Op::kDiv:
      if (numbers) {
        if (b.as_float() == 0) type_error("division by zero");
        return Value::floating(a.as_float() / b.as_float());
      }
      break;
    case Expr::Op::kFloorDiv:
      if (numbers) {
        if (b.as_float() == 0) type_error("integer division or modulo by zero");
        if (floats) return Value::floating(std::floor(a.as_float() / b.as_float()));
        return Value::integer(floor_div(a.as_int(), b.as_int()));
      }
      break;
    case Expr::Op::kMod:
      if (a.is_string()) return percent_format(a.as_string(), b);
      if (numbers) {
        if (b.as_float() == 0) type_error("integer division or modulo by zero");
        if (floats) {
          double m = std::fmod(a.as_float(), b.as_float());
          if (m != 0 && ((m < 0) != (b.as_float() < 0))) m += b.as_float();
          return Value::floating(m);
        }
        return Value::integer(floor_mod(a.as_int(), b.as_int()));
      }
      break;
    case Expr::Op::kPow:
      if (numbers) {
        if (floats || b.as_int() < 0) return Value::floating(std::pow(a.as_float(), b.as_float()));
        int64_t result = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) {
          result = checked(kMulOverflow, result, a.as_int());
          if (result == 0 || result == 1) break;
        }
        return Value::integer(result);
      }
      break;
    case Expr::Op::kConcat: {
      std::string s = a.str();
      s += b.str();
      renderer.check_size(s.size());
      return Value::string(std::move(s));
    }
    default: break;
  }
  unsupported_operands(op, a, b);
}

Renderer::~Renderer() {
  for (const ScopePtr& scope : macro_scopes_) scope->variables.clear();
  for (const Value& ns : namespaces_) ns.as_namespace().attributes = Dict();
}

void Renderer::step() {
  if (++steps_ > options_.max_steps)
    throw TemplateError("rendering took more than " + std::to_string(options_.max_steps) +
                            " steps (RenderOptions::max_steps); the template or its input is too large",
                        TemplateError::Cause::kLimit);
}

void Renderer::check_size(size_t size) const {
  if (size > options_.max_output_bytes)
    throw TemplateError("a string or list of " + std::to_string(size) + " bytes or items is larger than the limit of " +
                            std::to_string(options_.max_output_bytes) + " (RenderOptions::max_output_bytes)",
                        TemplateError::Cause::kLimit);
}

void Renderer::write(std::string_view text) {
  check_size(out_.size() + text.size());
  out_ += text;
}

std::string Renderer::run(const Body& body, ScopePtr globals) {
  exec_body(body, globals);
  return std::move(out_);
}

std::string Renderer::capture(const Body& body, const ScopePtr& scope) {
  std::string saved;
  saved.swap(out_);
  exec_body(body, scope);
  saved.swap(out_);
  return saved;
}

Renderer::Flow Renderer::exec_body(const Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    const Flow flow = exec(*s, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const ScopePtr& scope) {
  line_ = s.line;
  step();
  switch (s.kind) {
    case Stmt::Kind::kText: write(s.text); return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      const Value v = eval(*s.exprs[0], scope);
      write(v.str());
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.exprs.size(); ++i) {
        line_ = s.exprs[i]->line;
        if (eval(*s.exprs[i], scope).truthy()) return exec_body(s.bodies[i], scope);
      }
      if (s.bodies.size() > s.exprs.size()) return exec_body(s.bodies.back(), scope);
      return Flow::kNormal;
    case Stmt::Kind::kFor: return exec_for(s, scope);
    case Stmt::Kind::kSet: exec_set(s, scope); return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      Value v = Value::string(capture(s.bodies[0], scope));
      if (!s.exprs.empty()) v = apply_filter_chain(*s.exprs[0], std::move(v), scope);
      scope->variables[s.names[0]] = std::move(v);
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: {
      const Stmt* macro = &s;
      const ScopePtr defined_in = scope;
      macro_scopes_.push_back(scope);
      scope->variables[s.names[0]] = Value::callable(s.names[0], [macro, defined_in](Renderer& r, CallArgs& args) {
        return r.call_macro(*macro, defined_in, args);
      });
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
    case Stmt::Kind::kFilterBlock: {
      const Value v = apply_filter_chain(*s.exprs[0], Value::string(capture(s.bodies[0], scope)), scope);
      write(v.str());
      return Flow::kNormal;
    }
    case Stmt::Kind::kGeneration: return exec_body(s.bodies[0], scope);
  }
  return Flow::kNormal;
}

namespace {

void bind_targets(Scope& scope, const std::vector<std::string>& names, const Value& value) {
  if (names.size() == 1) {
    scope.variables[names[0]] = value;
    return;
  }
  Value::List items;
  if (value.is_list()) items = value.as_list();
  else if (value.is_string() || value.is_dict()) items = iterate(value);
  else if (value.is_undefined()) fail_undefined(value);
  else type_error("cannot unpack a non-iterable " + value.type_name() + " object");
  if (items.size() != names.size())
    type_error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) +
               " names");
  for (size_t i = 0; i < names.size(); ++i) scope.variables[names[i]] = items[i];
}

}  // namespace

Renderer::Flow Renderer::exec_for(const Stmt& s, const ScopePtr& scope) {
  const Value iterable = eval(*s.exprs[0], scope);
  if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string())
    type_error("'" + iterable.type_name() + "' object is not iterable");
  Value::List items = iterate(iterable);
  if (s.exprs.size() > 1) {
    Value::List kept;
    for (Value& item : items) {
      step();
      auto filter_scope = std::make_shared<Scope>();
      filter_scope->parent = scope;
      bind_targets(*filter_scope, s.names, item);
      if (eval(*s.exprs[1], filter_scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (s.bodies.size() > 1) {
      auto else_scope = std::make_shared<Scope>();
      else_scope->parent = scope;
      exec_body(s.bodies[1], else_scope);
    }
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    bind_targets(*iteration, s.names, items[static_cast<size_t>(i)]);
    Dict loop;
    loop.set(Value::string("index"), Value::integer(i + 1));
    loop.set(Value::string("index0"), Value::integer(i));
    loop.set(Value::string("revindex"), Value::integer(n - i));
    loop.set(Value::string("revindex0"), Value::integer(n - i - 1));
    loop.set(Value::string("first"), Value::boolean(i == 0));
    loop.set(Value::string("last"), Value::boolean(i == n - 1));
    loop.set(Value::string("length"), Value::integer(n));
    loop.set(Value::string("depth"), Value::integer(1));
    loop.set(Value::string("depth0"), Value::integer(0));
    if (i > 0) loop.set(Value::string("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.set(Value::string("nextitem"), items[static_cast<size_t>(i + 1)]);
    loop.set(Value::string("cycle"), Value::callable("loop.cycle", [i](Renderer&, CallArgs& args) {
      if (args.positional.empty()) type_error("loop.cycle() needs at least one value");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }));
    iteration->variables["loop"] = Value::dict(std::move(loop));
    const Flow flow = exec_body(s.bodies[0], iteration);
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Renderer::exec_set(const Stmt& s, const ScopePtr& scope) {
  Value v = eval(*s.exprs[0], scope);
  if (!s.attribute.empty()) {
    const Value* target = scope->find(s.names[0]);
    if (!target || !target->is_namespace())
      type_error("cannot assign attribute '" + s.attribute + "' on '" + s.names[0] +
                 "', which is not a namespace() object");
    target->as_namespace().attributes.set(Value::string(s.attribute), std::move(v));
    return;
  }
  bind_targets(*scope, s.names, v);
}

Value Renderer::call_macro(const Stmt& macro, const ScopePtr& defined_in, CallArgs& args) {
  const std::string& name = macro.names[0];
  const size_t params = macro.names.size() - 1;
  if (args.positional.size() > params)
    type_error("macro '" + name + "' takes not more than " + std::to_string(params) + " argument(s)");
  if (++call_depth_ > options_.max_call_depth)
    throw TemplateError("macro calls nest deeper than " + std::to_string(options_.max_call_depth) +
                            " (RenderOptions::max_call_depth)",
                        TemplateError::Cause::kLimit);
  auto scope = std::make_shared<Scope>();
  scope->parent = defined_in;
  std::vector<bool> bound(params, false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->variables[macro.names[i + 1]] = args.positional[i];
    bound[i] = true;
  }
  for (auto& [key, value] : args.keyword) {
    size_t k = 0;
    while (k < params && macro.names[k + 1] != key) ++k;
    if (k == params) type_error("macro '" + name + "' takes no keyword argument '" + key + "'");
    scope->variables[key] = value;
    bound[k] = true;
  }
  for (size_t k = 0; k < params; ++k) {
    if (bound[k]) continue;
    scope->variables[macro.names[k + 1]] =
        macro.exprs[k] ? eval(*macro.exprs[k], scope) : Value::undefined("'" + macro.names[k + 1] + "' is undefined");
  }
  const int saved_line = line_;
  std::string text = capture(macro.bodies[0], scope);
  line_ = saved_line;
  --call_depth_;
  return Value::string(std::move(text));
}

CallArgs Renderer::eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs args;
  const size_t keyword_start = e.children.size() - e.keywords.size();
  for (size_t i = first; i < keyword_start; ++i) args.positional.push_back(eval(*e.children[i], scope));
  for (size_t i = keyword_start; i < e.children.size(); ++i)
    args.keyword.emplace_back(e.keywords[i - keyword_start], eval(*e.children[i], scope));
  return args;
}

Value Renderer::apply_filter_chain(const Expr& chain, Value input, const ScopePtr& scope) {
  Value inner = chain.children[0] ? apply_filter_chain(*chain.children[0], std::move(input), scope) : std::move(input);
  CallArgs args = eval_args(chain, 1, scope);
  return apply_filter(*this, chain.name, inner, args);
}

Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
  step();
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.value;
    case Expr::Kind::kName: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Value::List items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c, scope));
      return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value key = eval(*e.children[i], scope);
        if (key.is_list() && !key.is_tuple()) type_error("unhashable type: 'list'");
        if (key.is_dict() || key.is_undefined()) type_error("unhashable type: '" + key.type_name() + "'");
        d.set(std::move(key), eval(*e.children[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kAttr: {
      const Value object = eval(*e.children[0], scope);
      line_ = e.line;
      return get_attribute(object, e.name);
    }
    case Expr::Kind::kItem: {
      const Value object = eval(*e.children[0], scope);
      const Value key = eval(*e.children[1], scope);
      line_ = e.line;
      return get_item(object, key);
    }
    case Expr::Kind::kSlice: {
      const Value object = eval(*e.children[0], scope);
      Value bounds[3];
      for (int i = 0; i < 3; ++i)
        if (e.children[static_cast<size_t>(i) + 1]) bounds[i] = eval(*e.children[static_cast<size_t>(i) + 1], scope);
      line_ = e.line;
      return get_slice(object, bounds[0], bounds[1], bounds[2]);
    }
    case Expr::Kind::kCall: {
      const Value callee = eval(*e.children[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      line_ = e.line;
      if (callee.is_undefined()) fail_undefined(callee);
      if (!callee.is_callable()) type_error("'" + callee.type_name() + "' object is not callable");
      return callee.as_callable().call(*this, args);
    }
    case Expr::Kind::kFilter: {
      const Value input = eval(*e.children[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      line_ = e.line;
      return apply_filter(*this, e.name, input, args);
    }
    case Expr::Kind::kTest: {
      const Value input = eval(*e.children[0], scope);
      CallArgs args = eval_args(e, 1, scope);
      line_ = e.line;
      return Value::boolean(apply_test(*this, e.name, input, args) != e.negated);
    }
    case Expr::Kind::kNot: return Value::boolean(!eval(*e.children[0], scope).truthy());
    case Expr::Kind::kNegate:
    case Expr::Kind::kPlus: {
      const Value v = eval(*e.children[0], scope);
      line_ = e.line;
      const bool negate = e.kind == Expr::Kind::kNegate;
      if (v.is_float()) return Value::floating(negate ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        if (negate && v.as_int() == INT64_MIN) type_error("integer overflow");
        return Value::integer(negate ? -v.as_int() : v.as_int());
      }
      if (v.is_undefined()) fail_undefined(v);
      type_error(std::string("bad operand type for unary ") + (negate ? "-" : "+") + ": '" + v.type_name() + "'");
    }
    case Expr::Kind::kBinary: {
      const Value a = eval(*e.children[0], scope);
      const Value b = eval(*e.children[1], scope);
      line_ = e.line;
      return binary_operation(e.op, a, b, *this);
    }
    case Expr::Kind::kAnd: {
      Value a = eval(*e.children[0], scope);
      return a.truthy() ? eval(*e.children[1], scope) : a;
    }
    case Expr::Kind::kOr: {
      Value a = eval(*e.children[0], scope);
      return a.truthy() ? a : eval(*e.children[1], scope);
    }
    case Expr::Kind::kCompare: {
      Value left = eval(*e.children[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1], scope);
        line_ = e.line;
        if (!eval_compare(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::kCondition:
      if (eval(*e.children[0], scope).truthy()) return eval(*e.children[1], scope);
      return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("the condition is false and has no else branch");
  }
  return Value();
}

bool Renderer::eval_compare(Expr::Op op, const Value& a, const Value& b) {
  switch (op) {
    case Expr::Op::kEq: return a == b;
    case Expr::Op::kNe: return !(a == b);
    case Expr::Op::kLt: return compare(a, b) < 0;
    case Expr::Op::kGt: return compare(a, b) > 0;
    case Expr::Op::kLe: return compare(a, b) <= 0;
    case Expr::Op::kGe: return compare(a, b) >= 0;
    case Expr::Op::kIn: return contains(b, a);
    case Expr::Op::kNotIn: return !contains(b, a);
    default: return false;
  }
}

}  // namespace hiq::jinja
