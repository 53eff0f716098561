// template/jinja.h — a Jinja interpreter for the subset that Hugging Face
// chat templates use, so `/v1/chat/completions` can render a model's own
// template (tokenizer_config.json's "chat_template", chat_template.jinja).
//
// Semantics are those of Python jinja2 as transformers runs it:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                 extensions=[loopcontrols])
// with the globals raise_exception(msg) and strftime_now(fmt) and HF's
// `tojson` filter (json.dumps with ensure_ascii=False, keys unsorted).
// Output must be byte-identical to jinja2's: tests/template_reference_test
// renders published templates with both and compares.
//
// Design. A template is lexed (template/lexer.h: whitespace control happens
// there), parsed into a tree (template/ast.h) and walked (template/render.cc)
// over Values (template/value.h) that mirror Python objects: ints and floats
// stay distinct and print as Python prints them, strings index by code point,
// dicts keep insertion order, a missing name or key is jinja2's Undefined
// (prints "", iterates as nothing, but fails on arithmetic, calls and
// attribute access). Everything outside the subset — include/import/extends,
// call blocks, recursive loops, unimplemented filters and tests — is refused
// when the template is parsed, so a model whose template cannot be served is
// known at load time. Inside the module errors travel as a TemplateError
// exception (a tree walk with a Status at every node would triple its size);
// the two functions below catch it and return a Status, so no exception
// crosses the module boundary.
//
// Abuse. Templates come from model directories and requests hold the data, so
// rendering is bounded: output and any string or list built along the way
// (RenderOptions::max_output_bytes), evaluation steps (max_steps: a loop of
// range(100000) nested three deep stops instead of hanging), macro recursion
// (max_call_depth), and parsing nesting depth (ParseLimits).
#pragma once

#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace hiq::jinja {

struct Expr;
struct Stmt;

// Limits and the clock of one render.
struct RenderOptions {
  size_t max_output_bytes = 16u << 20;  // output, and any one string or list built while rendering
  uint64_t max_steps = 20'000'000;      // expressions evaluated plus loop iterations
  int max_call_depth = 64;              // nested macro calls
  // strftime_now's clock: the local time now. Tests set a fixed time.
  std::function<std::tm()> now;
  Status validate() const;
};

class Template {
 public:
  // Parses a template. Errors (kInvalidArgument): a syntax error or a
  // construct outside the supported subset, with the line number and the
  // construct named ("chat template line 12: the 'include' tag is not supported").
  static Result<Template> parse(std::string_view source);

  // Renders with `context` (a JSON object: its members are the global
  // variables). Errors (kInvalidArgument): raise_exception(msg) gives msg as
  // it is; an unsupported method, a type error or an undefined value used
  // where jinja2 fails gives a message with the line. kResourceExhausted: a
  // limit of `options` was reached. The Template is immutable: concurrent
  // renders are safe.
  // An ordered_json context keeps its objects' key order as Python would;
  // nlohmann::json has sorted it already (see Value::from_json).
  Result<std::string> render(const nlohmann::json& context) const;
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options) const;
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options) const;

 private:
  struct Tree;
  template <typename Json>
  Result<std::string> render_json(const Json& context, const RenderOptions& options) const;
  explicit Template(std::shared_ptr<const Tree> tree) : tree_(std::move(tree)) {}
  std::shared_ptr<const Tree> tree_;
};

}  // namespace hiq::jinja
