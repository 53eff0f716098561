#include "template/parser.h"

#include <initializer_list>

#include "template/builtins.h"
#include "template/lexer.h"

namespace hiq::jinja {
namespace {

using T = Token::Type;

// jinja2's tags that the interpreter does not implement.
constexpr std::string_view kUnsupportedTags[] = {"include", "import", "from", "extends", "block", "call", "with",
                                                 "autoescape", "do", "trans", "pluralize", "debug", "recursive"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits) : tokens_(std::move(tokens)), limits_(limits) {}

  Body parse() {
    Body body = parse_body({}, nullptr);
    return body;
  }

 private:
  // ---- helpers ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const { return cur().type == T::kOperator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == T::kName && cur().text == name; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(int line, const std::string& message) const {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + message);
  }
  [[noreturn]] void fail_here(const std::string& what_was_expected) const {
    fail(cur().line, "expected " + what_was_expected + ", found " + describe(cur()));
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kText: return "text";
      case T::kVariableBegin: return "'{{'";
      case T::kVariableEnd: return "'}}'";
      case T::kBlockBegin: return "'{%'";
      case T::kBlockEnd: return "'%}'";
      case T::kName: return "'" + t.text + "'";
      case T::kString: return "a string";
      case T::kInteger: case T::kFloat: return "the number " + t.text;
      case T::kOperator: return "'" + t.text + "'";
      case T::kEnd: return "the end of the template";
    }
    return "a token";
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail_here("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (cur().type != T::kName) fail_here("a name");
    std::string name = cur().text;
    next();
    return name;
  }
  void expect_block_end() {
    if (cur().type != T::kBlockEnd) fail_here("'%}'");
    next();
  }

  struct DepthGuard {
    DepthGuard(Parser& p, int line) : parser(p) {
      if (++parser.depth_ > parser.limits_.max_nesting)
        parser.fail(line, "the template nests deeper than " + std::to_string(parser.limits_.max_nesting) + " levels");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  static ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses statements until a block tag named in `end_tags` (consumed up to
  // its name; *ended_by receives it) or, with no end tags, the end of input.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string* ended_by,
                  const char* opener = nullptr, int opener_line = 0) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::kEnd) {
        if (end_tags.size() == 0) return body;
        fail(opener_line, "the '" + std::string(opener) + "' tag is not closed (missing '" +
                              std::string(*end_tags.begin()) + "')");
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.type == T::kVariableBegin) {
        const int line = t.line;
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = line;
        s->exprs.push_back(parse_tuple_expression());
        if (cur().type != T::kVariableEnd) fail_here("'}}'");
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != T::kBlockBegin) fail_here("text or a tag");
      const int line = t.line;
      next();
      if (cur().type != T::kName) fail_here("a tag name");
      const std::string tag = cur().text;
      for (std::string_view end : end_tags) {
        if (tag == end) {
          next();
          *ended_by = tag;
          return body;
        }
      }
      next();
      body.push_back(parse_statement(tag, line));
    }
  }

  std::unique_ptr<Stmt> parse_statement(const std::string& tag, int line) {
    DepthGuard guard(*this, line);
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (tag == "if") return parse_if(std::move(s));
    if (tag == "for") return parse_for(std::move(s));
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "macro") return parse_macro(std::move(s));
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(line, "'" + tag + "' is outside a for loop");
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
      return s;
    }
    if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      ExprPtr chain;
      do {
        chain = parse_filter(std::move(chain));
      } while (accept_op("|"));
      s->exprs.push_back(std::move(chain));
      expect_block_end();
      std::string ended;
      s->bodies.push_back(parse_body({"endfilter"}, &ended, "filter", line));
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      expect_block_end();
      std::string ended;
      s->bodies.push_back(parse_body({"endgeneration"}, &ended, "generation", line));
      expect_block_end();
      return s;
    }
    for (std::string_view unsupported : kUnsupportedTags)
      if (tag == unsupported) fail(line, "the '" + tag + "' tag is not supported");
    if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else")
      fail(line, "unexpected '" + tag + "' (no open block ends or continues here)");
    fail(line, "unknown tag '" + tag + "'");
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kIf;
    const int line = s->line;
    s->exprs.push_back(parse_expression());
    expect_block_end();
    while (true) {
      std::string ended;
      s->bodies.push_back(parse_body({"endif", "elif", "else"}, &ended, "if", line));
      if (ended == "elif") {
        s->exprs.push_back(parse_expression());
        expect_block_end();
      } else if (ended == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endif"}, &ended, "if", line));
        expect_block_end();
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool parenthesized = accept_op("(");
    do {
      names.push_back(expect_name());
    } while (accept_op(",") && cur().type == T::kName);
    if (parenthesized) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kFor;
    const int line = s->line;
    s->names = parse_targets();
    if (!accept_name("in")) fail_here("'in'");
    s->exprs.push_back(parse_tuple_expression(/*with_condition=*/false));
    if (accept_name("if")) s->exprs.push_back(parse_expression());
    if (is_name("recursive")) fail(cur().line, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string ended;
    s->bodies.push_back(parse_body({"endfor", "else"}, &ended, "for", line));
    --loop_depth_;
    if (ended == "else") {
      expect_block_end();
      s->bodies.push_back(parse_body({"endfor"}, &ended, "for", line));
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    const int line = s->line;
    s->names.push_back(expect_name());
    if (accept_op(".")) {
      s->attribute = expect_name();
    } else {
      while (accept_op(",")) s->names.push_back(expect_name());
    }
    if (accept_op("=")) {
      s->kind = Stmt::Kind::kSet;
      s->exprs.push_back(parse_tuple_expression());
      expect_block_end();
      return s;
    }
    if (s->names.size() != 1 || !s->attribute.empty()) fail_here("'='");
    s->kind = Stmt::Kind::kSetBlock;
    if (accept_op("|")) {
      ExprPtr chain;
      do {
        chain = parse_filter(std::move(chain));
      } while (accept_op("|"));
      s->exprs.push_back(std::move(chain));
    }
    expect_block_end();
    std::string ended;
    const int saved_loop_depth = loop_depth_;
    s->bodies.push_back(parse_body({"endset"}, &ended, "set", line));
    loop_depth_ = saved_loop_depth;
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kMacro;
    const int line = s->line;
    s->names.push_back(expect_name());
    expect_op("(");
    while (!is_op(")")) {
      s->names.push_back(expect_name());
      s->exprs.push_back(accept_op("=") ? parse_expression() : nullptr);
      if (!accept_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot leave a macro
    std::string ended;
    s->bodies.push_back(parse_body({"endmacro"}, &ended, "macro", line));
    loop_depth_ = saved_loop_depth;
    if (cur().type == T::kName) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // ---- expressions (jinja2's grammar and precedence) ----

  // An expression, or a tuple when commas follow: `a, b`.
  ExprPtr parse_tuple_expression(bool with_condition = true) {
    const int line = cur().line;
    ExprPtr first = parse_expression(with_condition);
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (accept_op(",")) {
      if (cur().type == T::kBlockEnd || cur().type == T::kVariableEnd || is_op(")") || is_name("if")) break;
      tuple->children.push_back(parse_expression(with_condition));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condition = true) {
    DepthGuard guard(*this, cur().line);
    return with_condition ? parse_condition() : parse_or();
  }

  ExprPtr parse_condition() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto cond = make(Expr::Kind::kCondition, line);
      cond->children.push_back(parse_or());
      cond->children.push_back(std::move(expr));
      cond->children.push_back(accept_name("else") ? parse_condition() : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = make(Expr::Kind::kOr, cur().line);
      next();
      e->children.push_back(std::move(left));
      e->children.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = make(Expr::Kind::kAnd, cur().line);
      next();
      e->children.push_back(std::move(left));
      e->children.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, cur().line);
      auto e = make(Expr::Kind::kNot, cur().line);
      next();
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      Expr::Op op;
      if (accept_op("==")) op = Expr::Op::kEq;
      else if (accept_op("!=")) op = Expr::Op::kNe;
      else if (accept_op("<")) op = Expr::Op::kLt;
      else if (accept_op(">")) op = Expr::Op::kGt;
      else if (accept_op("<=")) op = Expr::Op::kLe;
      else if (accept_op(">=")) op = Expr::Op::kGe;
      else if (accept_name("in")) op = Expr::Op::kIn;
      else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        next();
        next();
        op = Expr::Op::kNotIn;
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, line);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binary(Expr::Op op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->op = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Expr::Op op = is_op("+") ? Expr::Op::kAdd : Expr::Op::kSub;
      const int line = cur().line;
      next();
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Op::kConcat, std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      Expr::Op op;
      if (is_op("*")) op = Expr::Op::kMul;
      else if (is_op("/")) op = Expr::Op::kDiv;
      else if (is_op("//")) op = Expr::Op::kFloorDiv;
      else if (is_op("%")) op = Expr::Op::kMod;
      else break;
      const int line = cur().line;
      next();
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (is_op("**")) {
      const int line = cur().line;
      next();
      left = binary(Expr::Op::kPow, std::move(left), parse_unary(), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this, cur().line);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? Expr::Kind::kNegate : Expr::Kind::kPlus, cur().line);
      next();
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expression(std::move(node));
    return node;
  }

  ExprPtr literal(Value v, int line) {
    auto e = make(Expr::Kind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case T::kName: {
        const std::string name = t.text;
        next();
        if (name == "true" || name == "True") return literal(Value::boolean(true), line);
        if (name == "false" || name == "False") return literal(Value::boolean(false), line);
        if (name == "none" || name == "None") return literal(Value::none(), line);
        auto e = make(Expr::Kind::kName, line);
        e->name = name;
        return e;
      }
      case T::kString: {
        std::string s;
        while (cur().type == T::kString) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        return literal(Value::string(std::move(s)), line);
      }
      case T::kInteger: {
        const int64_t i = t.integer;
        next();
        return literal(Value::integer(i), line);
      }
      case T::kFloat: {
        const double f = t.floating;
        next();
        return literal(Value::floating(f), line);
      }
      case T::kOperator:
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(Expr::Kind::kTuple, line);
          ExprPtr inner = parse_expression();
          if (is_op(",")) {
            auto tuple = make(Expr::Kind::kTuple, line);
            tuple->children.push_back(std::move(inner));
            while (accept_op(",")) {
              if (is_op(")")) break;
              tuple->children.push_back(parse_expression());
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::kList, line);
          while (!is_op("]")) {
            list->children.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::kDict, line);
          while (!is_op("}")) {
            dict->children.push_back(parse_expression());
            expect_op(":");
            dict->children.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return dict;
        }
        break;
      default: break;
    }
    fail_here("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (accept_op(".")) {
        if (cur().type == T::kInteger) {
          auto item = make(Expr::Kind::kItem, line);
          item->children.push_back(std::move(node));
          item->children.push_back(literal(Value::integer(cur().integer), line));
          next();
          node = std::move(item);
        } else {
          auto attr = make(Expr::Kind::kAttr, line);
          attr->name = expect_name();
          attr->children.push_back(std::move(node));
          node = std::move(attr);
        }
      } else if (accept_op("[")) {
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression();
    while (colons < 2 && accept_op(":")) {
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) {
      auto item = make(Expr::Kind::kItem, line);
      item->children.push_back(std::move(object));
      item->children.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = make(Expr::Kind::kSlice, line);
    slice->children.push_back(std::move(object));
    for (auto& p : parts) slice->children.push_back(std::move(p));
    return slice;
  }

  // (args...) after a callee, a filter or a test.
  void parse_arguments(Expr& into) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().type == T::kName && peek().type == T::kOperator && peek().text == "=") {
        into.keywords.push_back(cur().text);
        next();
        next();
        into.children.push_back(parse_expression());
      } else {
        if (!into.keywords.empty()) fail(cur().line, "a positional argument follows a keyword argument");
        into.children.push_back(parse_expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::kCall, cur().line);
    call->children.push_back(std::move(callee));
    parse_arguments(*call);
    return call;
  }

  ExprPtr parse_filter(ExprPtr input) {
    const int line = cur().line;
    auto f = make(Expr::Kind::kFilter, line);
    f->name = expect_name();
    while (accept_op(".")) f->name += "." + expect_name();
    if (!is_supported_filter(f->name))
      fail(line, is_jinja_filter(f->name) ? "the '" + f->name + "' filter is not supported"
                                          : "unknown filter '" + f->name + "'");
    f->children.push_back(std::move(input));
    if (is_op("(")) parse_arguments(*f);
    return f;
  }

  ExprPtr parse_filter_expression(ExprPtr node) {
    while (true) {
      if (accept_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr input) {
    const int line = cur().line;
    next();  // 'is'
    auto t = make(Expr::Kind::kTest, line);
    t->negated = accept_name("not");
    t->name = expect_name();
    while (accept_op(".")) t->name += "." + expect_name();
    if (!is_supported_test(t->name))
      fail(line, is_jinja_test(t->name) ? "the '" + t->name + "' test is not supported"
                                        : "unknown test '" + t->name + "'");
    t->children.push_back(std::move(input));
    if (is_op("(")) {
      parse_arguments(*t);
    } else if ((cur().type == T::kName || cur().type == T::kString || cur().type == T::kInteger ||
                cur().type == T::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur().line, "tests cannot be chained with 'is'");
      t->children.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  std::vector<Token> tokens_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    throw TemplateError("chat template line 1: the template is " + std::to_string(source.size()) +
                        " bytes, more than the limit of " + std::to_string(limits.max_source_bytes));
  return Parser(tokenize(source), limits).parse();
}

}  // namespace hiq::jinja
