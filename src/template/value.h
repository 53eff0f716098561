// template/value.h — the values a chat template computes with, as jinja2
// sees Python objects: undefined, none, bool, int, float, str, list/tuple,
// dict (ordered as inserted), callables (globals, bound methods, macros) and
// namespace() objects.
//
// Strings, lists and dicts are immutable once built (the environment is
// jinja2's ImmutableSandboxedEnvironment, where list.append is refused), so a
// Value shares them by pointer and copying one is cheap. A namespace is the
// one mutable object (`{% set ns.x = 1 %}`) and is shared by reference, as in
// Python.
//
// Operations that fail in Python (a TypeError, an UndefinedError) throw
// TemplateError; template/jinja.cc turns it into a Status at the API boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hiq::jinja {

// A failure while rendering or parsing.
class TemplateError : public std::runtime_error {
 public:
  enum class Cause {
    kError,   // a type error, an undefined value used, a bad argument: the line is added
    kRaised,  // the template's own raise_exception(msg): msg is passed on as it is
    kLimit,   // a RenderOptions limit was reached (kResourceExhausted)
  };
  explicit TemplateError(const std::string& message, Cause cause = Cause::kError)
      : std::runtime_error(message), cause_(cause) {}
  Cause cause() const { return cause_; }

 private:
  Cause cause_;
};

class Value;
class Renderer;

// The arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable value: a global function, a bound method, a macro.
struct Callable {
  std::string name;  // for messages and repr
  std::function<Value(Renderer&, CallArgs&)> call;
};

class Dict;
struct Namespace;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kNamespace };
  using List = std::vector<Value>;

  Value() = default;  // undefined
  static Value undefined(std::string message);  // why: "'foo' is undefined", for errors
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(List items, bool tuple = false);
  static Value dict(Dict d);
  static Value callable(std::string name, std::function<Value(Renderer&, CallArgs&)> call);
  static Value make_namespace(Dict attributes);
  // JSON values as Python's json module loads them. nlohmann::json keeps
  // object keys sorted; ordered_json keeps them as written, as Python does,
  // which matters wherever a template prints a dict (tool schemas | tojson).
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // bool and int
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const;  // string, or an undefined's message
  const List& as_list() const;
  const Dict& as_dict() const;
  const Callable& as_callable() const;
  Namespace& as_namespace() const;

  // Python's truth value (undefined is false).
  bool truthy() const;
  // str(x): None, True, 1.5, "['a', 1]"; undefined prints as "".
  std::string str() const;
  // repr(x), as str() uses it for the items of a list or dict. Throws past
  // 512 levels (a namespace that holds itself).
  std::string repr(int depth = 0) const;
  // The Python type name, for messages: 'str', 'int', 'dict', 'undefined'.
  std::string type_name() const;
  // Why an undefined value is undefined, for the error when it is used.
  std::string undefined_message() const;

  // Python ==: 1 == 1.0 == True, list != tuple, undefined == undefined.
  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const void> object_;  // string, List, Dict, Callable or Namespace by kind
};

// A dict as Python keeps one: insertion-ordered, keys of any hashable kind
// (in practice strings). String keys are indexed, so lookups stay O(1) on
// the large objects a request may hold (tool schemas).
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts, or replaces the value of an existing key (keeping its place).
  void set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> string_index_;
};

struct Namespace {
  Dict attributes;
};

// Orders a and b as Python's < does for numbers, strings and lists; throws
// TemplateError for other kinds. Returns -1, 0 or 1.
int compare(const Value& a, const Value& b);

// json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...)
// as Hugging Face's tojson filter calls it. indent: nullptr for none, else the
// string that one level adds. Throws TemplateError for values JSON cannot
// hold (undefined, callables, namespaces), as Python's TypeError.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  const std::string* indent = nullptr;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string dump_json(const Value& value, const JsonDumpOptions& options);

}  // namespace hiq::jinja
