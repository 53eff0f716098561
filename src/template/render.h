// template/render.h — the tree walker: scopes, output, limits. Internal to
// the template module; builtins.cc calls back into it (tests inside select,
// macros, the clock, size checks).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.h"
#include "template/jinja.h"
#include "template/value.h"

namespace hiq::jinja {

// Variables visible at one point. A for loop's iteration and a macro call get
// their own scope (what they `set` is gone afterwards, as in jinja2); if
// blocks do not.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> variables;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      const auto it = s->variables.find(name);
      if (it != s->variables.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {}
  // Breaks the reference cycles a render can make (a macro held by the scope
  // it captured; a namespace holding itself) so nothing outlives the render.
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Renders `body` with `globals`; the result is the output.
  std::string run(const Body& body, ScopePtr globals);

  // One more step of work; throws at the limit.
  void step();
  // Throws when a string or list of `size` would pass the output limit.
  void check_size(size_t size) const;
  const RenderOptions& options() const { return options_; }
  // Records a namespace() so the destructor can clear it.
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }
  int line() const { return line_; }

  Value eval(const Expr& e, const ScopePtr& scope);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope);
  Flow exec(const Stmt& s, const ScopePtr& scope);
  Flow exec_for(const Stmt& s, const ScopePtr& scope);
  void exec_set(const Stmt& s, const ScopePtr& scope);
  std::string capture(const Body& body, const ScopePtr& scope);
  void write(std::string_view text);
  Value call_macro(const Stmt& macro, const ScopePtr& defined_in, CallArgs& args);
  bool eval_compare(Expr::Op op, const Value& a, const Value& b);
  Value apply_filter_chain(const Expr& chain, Value input, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope);

  const RenderOptions& options_;
  std::string out_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  std::vector<ScopePtr> macro_scopes_;
  std::vector<Value> namespaces_;
};

// Python's binary operators over Values (jinja2 hands them to Python).
Value binary_operation(Expr::Op op, const Value& a, const Value& b, const Renderer& renderer);

}  // namespace hiq::jinja
