#include "template/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>

#include "template/py_str.h"
#include "template/render.h"

namespace hiq::jinja {
namespace {

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message); }
[[noreturn]] void fail_undefined(const Value& v) { throw TemplateError(v.undefined_message()); }

using Bound = std::vector<std::optional<Value>>;

// Binds a call's arguments to parameter names as Python does.
Bound bind(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params) {
  Bound out(params.size());
  if (args.positional.size() > params.size())
    fail(std::string(function) + "() takes at most " + std::to_string(params.size()) + " argument(s), " +
         std::to_string(args.positional.size()) + " given");
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t k = 0;
    for (std::string_view p : params) {
      if (p == key) break;
      ++k;
    }
    if (k == params.size()) fail(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    if (out[k]) fail(std::string(function) + "() got multiple values for argument '" + key + "'");
    out[k] = value;
  }
  return out;
}

bool given(const std::optional<Value>& v) { return v.has_value() && !v->is_none(); }

int64_t int_argument(const std::optional<Value>& v, std::string_view what, int64_t fallback) {
  if (!given(v)) return fallback;
  if (!v->is_int() && !v->is_bool()) fail(std::string(what) + " must be an integer, not '" + v->type_name() + "'");
  return v->as_int();
}

const std::string& string_argument(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail(std::string(what) + " must be a string, not '" + v.type_name() + "'");
  return v.as_string();
}

std::optional<std::string> chars_argument(const std::optional<Value>& v, std::string_view what) {
  if (!given(v)) return std::nullopt;
  return string_argument(*v, what);
}

// ---- attribute paths (map, selectattr, sort, join, sum ...) ----

Value get_path(const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : py::split(path, std::string("."), -1)) {
    int64_t index = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool numeric = !part.empty() && ec == std::errc() && ptr == part.data() + part.size();
    v = get_item(v, numeric ? Value::integer(index) : Value::string(part));
  }
  return v;
}

// ---- Python str methods ----

constexpr std::string_view kStrMethods[] = {
    "capitalize", "casefold",  "center",     "count",        "encode",       "endswith",  "expandtabs", "find",
    "format",     "format_map", "index",     "isalnum",      "isalpha",      "isascii",   "isdecimal",  "isdigit",
    "isidentifier", "islower", "isnumeric",  "isprintable",  "isspace",      "istitle",   "isupper",    "join",
    "ljust",      "lower",     "lstrip",     "maketrans",    "partition",    "removeprefix", "removesuffix", "replace",
    "rfind",      "rindex",    "rjust",      "rpartition",   "rsplit",       "rstrip",    "split",      "splitlines",
    "startswith", "strip",     "swapcase",   "title",        "translate",    "upper",     "zfill"};
constexpr std::string_view kListMutators[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
constexpr std::string_view kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};

bool listed(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
template <size_t N>
bool listed(std::string_view name, const std::string_view (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = string_argument(a, prefix ? "startswith's argument" : "endswith's argument");
    return prefix ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                  : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.as_list())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value string_list(std::vector<std::string> parts) {
  Value::List items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

Value call_string_method(Renderer& renderer, const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "startswith" || name == "endswith") {
    const Bound a = bind(args, name, {"prefix"});
    if (!a[0]) fail(name + "() takes exactly one argument");
    return Value::boolean(affix_matches(s, *a[0], name == "startswith"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Bound a = bind(args, name, {"chars"});
    return Value::string(py::strip(s, chars_argument(a[0], name + "'s argument"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Bound a = bind(args, name, {"sep", "maxsplit"});
    const std::optional<std::string> sep = chars_argument(a[0], name + "'s separator");
    if (sep && sep->empty()) fail("empty separator");
    const int64_t max_split = int_argument(a[1], name + "'s maxsplit", -1);
    return string_list(name == "split" ? py::split(s, sep, max_split) : py::rsplit(s, sep, max_split));
  }
  if (name == "splitlines") {
    bind(args, name, {});
    return string_list(py::splitlines(s));
  }
  if (name == "replace") {
    const Bound a = bind(args, name, {"old", "new", "count"});
    if (!a[0] || !a[1]) fail("replace() takes at least 2 arguments");
    std::string out = py::replace(s, string_argument(*a[0], "replace's old"), string_argument(*a[1], "replace's new"),
                                  int_argument(a[2], "replace's count", -1));
    renderer.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    bind(args, name, {});
    if (name == "upper") return Value::string(py::upper(s));
    if (name == "lower") return Value::string(py::lower(s));
    if (name == "title") return Value::string(py::title(s));
    return Value::string(py::capitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const Bound a = bind(args, name, {"sub"});
    if (!a[0]) fail(name + "() takes exactly one argument");
    const std::string& sub = string_argument(*a[0], name + "'s argument");
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(py::code_point_count(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(py::code_point_count(s.substr(0, at))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const Bound a = bind(args, name, {"affix"});
    if (!a[0]) fail(name + "() takes exactly one argument");
    const std::string& x = string_argument(*a[0], name + "'s argument");
    if (name == "removeprefix") return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value::string(ends ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "join") {
    const Bound a = bind(args, name, {"iterable"});
    if (!a[0]) fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*a[0])) {
      if (!item.is_string()) fail("sequence item: expected str instance, " + item.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      renderer.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "isspace") {
    bind(args, name, {});
    if (s.empty()) return Value::boolean(false);
    for (char32_t c : py::code_points(s))
      if (!py::is_space(c)) return Value::boolean(false);
    return Value::boolean(true);
  }
  fail("the string method '" + name + "' is not supported");
}

Value bound_method(const Value& self, const std::string& name) {
  return Value::callable(self.type_name() + "." + name, [self, name](Renderer& renderer, CallArgs& args) -> Value {
    if (self.is_string()) return call_string_method(renderer, self.as_string(), name, args);
    if (self.is_dict()) {
      const Dict& d = self.as_dict();
      if (name == "get") {
        const Bound a = bind(args, "get", {"key", "default"});
        if (!a[0]) fail("get() takes at least 1 argument");
        const Value* v = d.find(*a[0]);
        return v ? *v : a[1] ? *a[1] : Value::none();
      }
      bind(args, name, {});
      Value::List out;
      for (const auto& [key, value] : d.items()) {
        if (name == "keys") out.push_back(key);
        else if (name == "values") out.push_back(value);
        else out.push_back(Value::list({key, value}, /*tuple=*/true));
      }
      return Value::list(std::move(out));
    }
    if (self.is_list()) {
      const Bound a = bind(args, name, {"value"});
      if (!a[0]) fail(name + "() takes exactly one argument");
      const auto& items = self.as_list();
      if (name == "count") return Value::integer(std::count(items.begin(), items.end(), *a[0]));
      const auto it = std::find(items.begin(), items.end(), *a[0]);
      if (it == items.end()) fail(a[0]->repr() + " is not in list");
      return Value::integer(it - items.begin());
    }
    fail("the method '" + name + "' is not supported");
  });
}

// ---- filters ----

Value to_list(const Value& v) { return Value::list(iterate(v)); }

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// jinja2's title filter: words begin after '-', whitespace and opening brackets.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  bool previous_delimiter = true;
  for (char32_t c : py::code_points(s)) {
    const bool delimiter = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    // Runs alternate between delimiters and words; each run's first char is upper-cased.
    if (delimiter != previous_delimiter) word_start = true;
    previous_delimiter = delimiter;
    std::string one;
    py::append_utf8(one, c);
    out += word_start ? py::upper(one) : py::lower(one);
    word_start = false;
  }
  return out;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && isdigit(static_cast<unsigned char>(s[i - 1])) &&
        isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    t += s[i];
  }
  if (t.empty()) return std::nullopt;
  const std::string lowered = py::lower(t);
  const std::string_view body = lowered[0] == '+' || lowered[0] == '-' ? std::string_view(lowered).substr(1) : lowered;
  const double sign = lowered[0] == '-' ? -1 : 1;
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return NAN;
  for (char c : body)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_int(const std::string& text, int64_t base) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '_' && i > 0 && i + 1 < s.size())) t += s[i];
  if (t.empty() || base < 2 || base > 36) return std::nullopt;
  size_t start = t[0] == '+' || t[0] == '-' ? 1 : 0;
  if (start == t.size()) return std::nullopt;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data() + start, t.data() + t.size(), v, static_cast<int>(base));
  if (ec != std::errc() || ptr != t.data() + t.size()) return std::nullopt;
  return t[0] == '-' ? -v : v;
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(py::code_point_count(v.as_string()));
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

// The key of sort/unique/min/max: an attribute path, lower-cased strings
// unless case_sensitive.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  Value key = given(attribute) ? get_path(item, attribute->str()) : item;
  if (!case_sensitive && key.is_string()) key = Value::string(py::lower(key.as_string()));
  return key;
}

Value select_or_reject(Renderer& renderer, const Value& input, CallArgs& args, bool select, bool by_attribute,
                       const std::string& filter) {
  std::vector<Value> rest = args.positional;
  if (!args.keyword.empty()) fail(filter + "() takes no keyword arguments");
  std::optional<std::string> attribute;
  if (by_attribute) {
    if (rest.empty()) fail(filter + "() needs an attribute name");
    attribute = string_argument(rest[0], filter + "'s attribute");
    rest.erase(rest.begin());
  }
  std::optional<std::string> test;
  if (!rest.empty()) {
    test = string_argument(rest[0], filter + "'s test");
    if (!is_supported_test(*test)) fail("unknown or unsupported test '" + *test + "' in " + filter + "()");
    rest.erase(rest.begin());
  }
  Value::List out;
  // jinja2 reads `if value: for item in value`: none (e.g. absent tools) selects nothing.
  for (const Value& item : input.truthy() ? iterate(input) : Value::List()) {
    renderer.step();
    const Value subject = attribute ? get_path(item, *attribute) : item;
    bool passes;
    if (test) {
      CallArgs test_args;
      test_args.positional = rest;
      passes = apply_test(renderer, *test, subject, test_args);
    } else {
      passes = subject.truthy();
    }
    if (passes == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

}  // namespace

Value::List iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return value.as_list();
    case Value::Kind::kDict: {
      Value::List keys;
      for (const auto& [key, v] : value.as_dict().items()) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      Value::List chars;
      const std::string& s = value.as_string();
      const std::vector<size_t> offsets = py::code_point_offsets(s);
      for (size_t k = 0; k + 1 < offsets.size(); ++k)
        chars.push_back(Value::string(s.substr(offsets[k], offsets[k + 1] - offsets[k])));
      return chars;
    }
    default: fail("'" + value.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        if (needle.is_undefined()) fail_undefined(needle);
        fail("'in <string>' requires string as left operand, not " + needle.type_name());
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList: {
      const auto& items = haystack.as_list();
      return std::find(items.begin(), items.end(), needle) != items.end();
    }
    case Value::Kind::kDict:
      if (needle.is_list() && !needle.is_tuple()) fail("unhashable type: 'list'");
      if (needle.is_dict()) fail("unhashable type: 'dict'");
      return haystack.as_dict().find(needle) != nullptr;
    default: fail("argument of type '" + haystack.type_name() + "' is not iterable");
  }
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  const std::string missing = "'" + object.type_name() + " object' has no attribute '" + name + "'";
  if (!name.empty() && name[0] == '_') return Value::undefined(missing);
  switch (object.kind()) {
    case Value::Kind::kString:
      if (listed(name, kStrMethods)) return bound_method(object, name);
      return Value::undefined(missing);
    case Value::Kind::kList:
      if (name == "index" || name == "count") return bound_method(object, name);
      if (listed(name, kListMutators))
        return Value::undefined("access to attribute '" + name + "' of 'list' object is unsafe (the environment is immutable)");
      return Value::undefined(missing);
    case Value::Kind::kDict: {
      if (listed(name, {"get", "items", "keys", "values"})) return bound_method(object, name);
      if (listed(name, kDictMutators))
        return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe (the environment is immutable)");
      if (name == "copy" || name == "fromkeys") return Value::callable("dict." + name, [name](Renderer&, CallArgs&) -> Value {
        fail("the dict method '" + name + "' is not supported");
      });
      const Value* v = object.as_dict().find(std::string_view(name));
      return v ? *v : Value::undefined(missing);
    }
    case Value::Kind::kNamespace: {
      const Value* v = object.as_namespace().attributes.find(std::string_view(name));
      return v ? *v : Value::undefined(missing);
    }
    default: return Value::undefined(missing);
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if ((object.is_string() || object.is_list()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (object.is_list()) {
      const auto& items = object.as_list();
      const auto n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'" + object.type_name() + " object' has no element " + key.repr());
      return items[static_cast<size_t>(i)];
    }
    const std::string& s = object.as_string();
    const std::vector<size_t> offsets = py::code_point_offsets(s);
    const auto n = static_cast<int64_t>(offsets.size() - 1);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + key.repr());
    const auto k = static_cast<size_t>(i);
    return Value::string(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
  }
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(key)) return *v;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  if (key.is_undefined()) fail_undefined(key);
  return Value::undefined("'" + object.type_name() + " object' has no element " + key.repr());
}

Value get_slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (object.is_undefined()) fail_undefined(object);
  if (!object.is_string() && !object.is_list()) fail("'" + object.type_name() + "' object is not subscriptable");
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  const std::optional<int64_t> start = bound(start_v, "start"), stop = bound(stop_v, "stop"), step_o = bound(step_v, "step");
  const int64_t step = step_o.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  const bool is_string = object.is_string();
  const std::vector<size_t> offsets = is_string ? py::code_point_offsets(object.as_string()) : std::vector<size_t>{};
  const int64_t n = is_string ? static_cast<int64_t>(offsets.size() - 1) : static_cast<int64_t>(object.as_list().size());
  const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) return std::max(x + n, lower);
    return std::min(x, upper);
  };
  const int64_t from = clamp(start, step > 0 ? lower : upper);
  const int64_t to = clamp(stop, step > 0 ? upper : lower);
  if (is_string) {
    const std::string& s = object.as_string();
    std::string out;
    if (step == 1) {
      if (from < to) out = s.substr(offsets[static_cast<size_t>(from)], offsets[static_cast<size_t>(to)] - offsets[static_cast<size_t>(from)]);
      return Value::string(std::move(out));
    }
    for (int64_t i = from; step > 0 ? i < to : i > to; i += step) {
      const auto k = static_cast<size_t>(i);
      out += s.substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
    return Value::string(std::move(out));
  }
  const auto& items = object.as_list();
  Value::List out;
  for (int64_t i = from; step > 0 ? i < to : i > to; i += step) out.push_back(items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), object.is_tuple());
}

namespace {

constexpr std::string_view kFilters[] = {
    "abs",  "attr",  "capitalize", "count",  "d",      "default", "e",       "escape", "first", "float", "indent",
    "int",  "items", "join",       "last",   "length", "list",    "lower",   "map",    "max",   "min",   "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper"};
constexpr std::string_view kJinjaOnlyFilters[] = {"batch", "center", "dictsort", "filesizeformat", "forceescape",
                                                  "format", "groupby", "pprint", "random", "slice", "striptags",
                                                  "truncate", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq",   "equalto", "==",    "even",      "false",  "float",
    "ge",      ">=",       "gt",      "greaterthan", ">",    "in",      "integer", "iterable", "le",    "<=",
    "lessthan", "lower",   "lt",      "<",           "mapping", "ne",   "!=",    "none",      "number", "odd",
    "sameas",  "sequence", "string",  "true",        "undefined", "upper"};
constexpr std::string_view kJinjaOnlyTests[] = {"escaped", "filter", "test"};

}  // namespace

bool is_supported_filter(std::string_view name) { return listed(name, kFilters); }
bool is_supported_test(std::string_view name) { return listed(name, kTests); }
bool is_jinja_filter(std::string_view name) { return listed(name, kJinjaOnlyFilters); }
bool is_jinja_test(std::string_view name) { return listed(name, kJinjaOnlyTests); }

Value apply_filter(Renderer& renderer, const std::string& name, const Value& input, CallArgs& args) {
  if (name == "tojson") {
    // Hugging Face's: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    const Bound a = bind(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonDumpOptions options;
    options.ensure_ascii = a[0] && a[0]->truthy();
    std::string indent;
    if (given(a[1])) {
      if (a[1]->is_string()) indent = a[1]->as_string();
      else indent = std::string(static_cast<size_t>(std::max<int64_t>(0, int_argument(a[1], "tojson's indent", 0))), ' ');
      options.indent = &indent;
      options.item_separator = ",";
    }
    if (given(a[2])) {
      if (!a[2]->is_list() || a[2]->as_list().size() != 2) fail("tojson's separators must be a pair of strings");
      options.item_separator = string_argument(a[2]->as_list()[0], "tojson's item separator");
      options.key_separator = string_argument(a[2]->as_list()[1], "tojson's key separator");
    }
    options.sort_keys = a[3] && a[3]->truthy();
    std::string out = dump_json(input, options);
    renderer.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "trim") {
    const Bound a = bind(args, name, {"chars"});
    return Value::string(py::strip(input.str(), chars_argument(a[0], "trim's chars"), true, true));
  }
  if (name == "length" || name == "count") {
    bind(args, name, {});
    return Value::integer(length_of(input));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title" || name == "string" ||
      name == "safe" || name == "e" || name == "escape") {
    bind(args, name, {});
    const std::string s = input.str();
    if (name == "upper") return Value::string(py::upper(s));
    if (name == "lower") return Value::string(py::lower(s));
    if (name == "capitalize") return Value::string(py::capitalize(s));
    if (name == "title") return Value::string(jinja_title(s));
    if (name == "e" || name == "escape") return Value::string(html_escape(s));
    if (name == "safe") return input.is_string() ? input : Value::string(s);
    return Value::string(s);
  }
  if (name == "default" || name == "d") {
    const Bound a = bind(args, name, {"default_value", "boolean"});
    const bool boolean = a[1] && a[1]->truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return a[0] ? *a[0] : Value::string("");
    return input;
  }
  if (name == "items") {
    bind(args, name, {});
    if (input.is_undefined()) return Value::list({});
    if (!input.is_dict()) fail("items: can only get item pairs from a mapping, not '" + input.type_name() + "'");
    Value::List out;
    for (const auto& [key, value] : input.as_dict().items()) out.push_back(Value::list({key, value}, true));
    return Value::list(std::move(out));
  }
  if (name == "join") {
    const Bound a = bind(args, name, {"d", "attribute"});
    const std::string separator = a[0] ? a[0]->str() : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first) out += separator;
      first = false;
      out += (given(a[1]) ? get_path(item, a[1]->str()) : item).str();
      renderer.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    bind(args, name, {});
    const Value::List items = iterate(input);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    bind(args, name, {});
    return to_list(input);
  }
  if (name == "reverse") {
    bind(args, name, {});
    if (input.is_string()) return get_slice(input, Value(), Value(), Value::integer(-1));
    Value::List items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "int") {
    const Bound a = bind(args, name, {"default", "base"});
    const Value fallback = a[0] ? *a[0] : Value::integer(0);
    const int64_t base = int_argument(a[1], "int's base", 10);
    if (input.is_int() || input.is_bool()) return Value::integer(input.as_int());
    if (input.is_float()) {
      const double f = input.as_float();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(f));
    }
    if (input.is_string()) {
      if (auto i = parse_int(input.as_string(), base)) return Value::integer(*i);
      if (auto f = parse_float(input.as_string()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
        return Value::integer(static_cast<int64_t>(*f));
    }
    return fallback;
  }
  if (name == "float") {
    const Bound a = bind(args, name, {"default"});
    const Value fallback = a[0] ? *a[0] : Value::floating(0.0);
    if (input.is_number()) return Value::floating(input.as_float());
    if (input.is_string())
      if (auto f = parse_float(input.as_string())) return Value::floating(*f);
    return fallback;
  }
  if (name == "abs") {
    bind(args, name, {});
    if (input.is_float()) return Value::floating(std::fabs(input.as_float()));
    if (input.is_int() || input.is_bool()) {
      if (input.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(std::llabs(input.as_int()));
    }
    if (input.is_undefined()) fail_undefined(input);
    fail("bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "round") {
    const Bound a = bind(args, name, {"precision", "method"});
    const int64_t precision = int_argument(a[0], "round's precision", 0);
    const std::string method = a[1] ? string_argument(*a[1], "round's method") : "common";
    if (!input.is_number()) {
      if (input.is_undefined()) fail_undefined(input);
      fail("round: a number is required, not '" + input.type_name() + "'");
    }
    if (precision < 0 || precision > 15) fail("round: a precision of " + std::to_string(precision) + " is not supported");
    const double x = input.as_float();
    // Python's round() keeps an integer (or a bool, as its int) an integer.
    if (method == "common" && !input.is_float()) return Value::integer(input.as_int());
    if (method == "common") {
      // Python's round(x, n): the correctly rounded decimal, ties to even, as
      // glibc's printf gives it (round(2.5) == 2.0, round(2.675, 2) == 2.67).
      if (!std::isfinite(x)) return Value::floating(x);
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value::floating(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return Value::floating(std::ceil(x * scale) / scale);
    if (method == "floor") return Value::floating(std::floor(x * scale) / scale);
    fail("round: method must be 'common', 'ceil' or 'floor'");
  }
  if (name == "replace") {
    const Bound a = bind(args, name, {"old", "new", "count"});
    if (!a[0] || !a[1]) fail("replace() takes at least 2 arguments");
    std::string out = py::replace(input.str(), a[0]->str(), a[1]->str(), int_argument(a[2], "replace's count", -1));
    renderer.check_size(out.size());
    return Value::string(std::move(out));
  }
  if (name == "indent") {
    const Bound a = bind(args, name, {"width", "first", "blank"});
    std::string indentation;
    if (a[0] && a[0]->is_string()) indentation = a[0]->as_string();
    else indentation = std::string(static_cast<size_t>(std::clamp<int64_t>(int_argument(a[0], "indent's width", 4), 0, 1 << 20)), ' ');
    const bool first = a[1] && a[1]->truthy(), blank = a[2] && a[2]->truthy();
    std::vector<std::string> lines = py::splitlines(input.str() + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) {
        out += '\n';
        if (blank || !lines[i].empty()) out += indentation;
      }
      out += lines[i];
      renderer.check_size(out.size());
    }
    if (first) out = indentation + out;
    return Value::string(std::move(out));
  }
  if (name == "map") {
    Value::List out;
    const Value::List items = input.truthy() ? iterate(input) : Value::List();  // jinja2: none maps to nothing
    const bool by_attribute = args.positional.empty();
    if (by_attribute) {
      const Bound a = bind(args, "map", {"attribute", "default"});
      if (!a[0]) fail("map() needs a filter name or attribute=");
      for (const Value& item : items) {
        Value v = get_path(item, a[0]->str());
        if (v.is_undefined() && a[1]) v = *a[1];
        out.push_back(std::move(v));
      }
      return Value::list(std::move(out));
    }
    const std::string filter = string_argument(args.positional[0], "map's filter");
    if (!is_supported_filter(filter)) fail("unknown or unsupported filter '" + filter + "' in map()");
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      renderer.step();
      CallArgs copy = rest;
      out.push_back(apply_filter(renderer, filter, item, copy));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") return select_or_reject(renderer, input, args, name == "select", false, name);
  if (name == "selectattr" || name == "rejectattr")
    return select_or_reject(renderer, input, args, name == "selectattr", true, name);
  if (name == "attr") {
    const Bound a = bind(args, name, {"name"});
    if (!a[0]) fail("attr() takes exactly one argument");
    // jinja2's attr() is getattr alone: a dict's keys are not attributes.
    const std::string& attribute = string_argument(*a[0], "attr's name");
    if (input.is_dict() && input.as_dict().find(std::string_view(attribute)) != nullptr &&
        !listed(attribute, {"get", "items", "keys", "values", "copy", "fromkeys"}) && !listed(attribute, kDictMutators))
      return Value::undefined("'dict object' has no attribute '" + attribute + "'");
    return get_attribute(input, attribute);
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool sort = name == "sort";
    const Bound a = sort ? bind(args, name, {"reverse", "case_sensitive", "attribute"})
                         : bind(args, name, {"case_sensitive", "attribute"});
    const bool reverse = sort && a[0] && a[0]->truthy();
    const bool case_sensitive = (sort ? a[1] : a[0]) && (sort ? a[1] : a[0])->truthy();
    const std::optional<Value>& attribute = sort ? a[2] : a[1];
    Value::List items = iterate(input);
    if (name == "unique") {
      Value::List out, seen;
      for (Value& item : items) {
        Value key = sort_key(item, attribute, case_sensitive);
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        renderer.step();
        seen.push_back(std::move(key));
        out.push_back(std::move(item));
      }
      return Value::list(std::move(out));
    }
    std::vector<std::pair<Value, Value>> keyed;
    for (Value& item : items) keyed.emplace_back(sort_key(item, attribute, case_sensitive), std::move(item));
    if (!sort) {
      if (keyed.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      size_t best = 0;
      for (size_t i = 1; i < keyed.size(); ++i) {
        const int c = compare(keyed[i].first, keyed[best].first);
        if (name == "min" ? c < 0 : c > 0) best = i;
      }
      return keyed[best].second;
    }
    std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
      return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    Value::List out;
    for (auto& [key, item] : keyed) out.push_back(std::move(item));
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    const Bound a = bind(args, name, {"attribute", "start"});
    Value total = a[1] ? *a[1] : Value::integer(0);
    for (const Value& item : iterate(input))
      total = binary_operation(Expr::Op::kAdd, total, given(a[0]) ? get_path(item, a[0]->str()) : item, renderer);
    return total;
  }
  fail("the '" + name + "' filter is not supported");
}

bool apply_test(Renderer& renderer, const std::string& name, const Value& v, CallArgs& args) {
  auto one_argument = [&]() -> const Value& {
    if (args.positional.size() != 1 || !args.keyword.empty()) fail("the '" + name + "' test takes one argument");
    return args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "lower" || name == "upper") {
    const std::string s = v.str();
    const std::string other = name == "lower" ? py::upper(s) : py::lower(s);
    const std::string same = name == "lower" ? py::lower(s) : py::upper(s);
    return same == s && other != s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const Value divisor = name == "divisibleby" ? one_argument() : Value::integer(2);
    const Value r = binary_operation(Expr::Op::kMod, v, divisor, renderer);
    return r == Value::integer(name == "odd" ? 1 : 0);
  }
  if (name == "sameas") {
    const Value& other = one_argument();
    if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == other.kind() && v == other;
    return v.kind() == other.kind() && v == other && (v.is_int() || v.is_string());
  }
  const Value& other = one_argument();
  if (name == "eq" || name == "equalto" || name == "==") return v == other;
  if (name == "ne" || name == "!=") return !(v == other);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other) < 0;
  if (name == "le" || name == "<=") return compare(v, other) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other) > 0;
  if (name == "ge" || name == ">=") return compare(v, other) >= 0;
  if (name == "in") return contains(other, v);
  fail("the '" + name + "' test is not supported");
}

void add_globals(Scope& scope) {
  scope.variables["range"] = Value::callable("range", [](Renderer& renderer, CallArgs& args) {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3)
      fail("range() takes 1 to 3 integer arguments");
    std::vector<int64_t> a;
    for (const Value& v : args.positional) {
      if (!v.is_int() && !v.is_bool()) fail("range(): '" + v.type_name() + "' object cannot be interpreted as an integer");
      a.push_back(v.as_int());
    }
    const int64_t start = a.size() == 1 ? 0 : a[0], stop = a.size() == 1 ? a[0] : a[1], step = a.size() == 3 ? a[2] : 1;
    if (step == 0) fail("range() arg 3 must not be zero");
    Value::List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      // jinja2's sandbox refuses ranges over MAX_RANGE (100000) items.
      if (out.size() >= 100000) fail("range too big, the sandbox allows at most 100000 items");
      renderer.step();
      out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  });
  auto dict_from_args = [](CallArgs& args, const char* function) {
    Dict d;
    if (args.positional.size() > 1) fail(std::string(function) + "() takes at most one positional argument");
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict()) fail(std::string(function) + "(): the positional argument must be a mapping");
      for (const auto& [key, value] : args.positional[0].as_dict().items()) d.set(key, value);
    }
    for (auto& [key, value] : args.keyword) d.set(Value::string(key), value);
    return d;
  };
  scope.variables["dict"] = Value::callable("dict", [dict_from_args](Renderer&, CallArgs& args) {
    return Value::dict(dict_from_args(args, "dict"));
  });
  scope.variables["namespace"] = Value::callable("namespace", [dict_from_args](Renderer& renderer, CallArgs& args) {
    Value ns = Value::make_namespace(dict_from_args(args, "namespace"));
    renderer.track_namespace(ns);
    return ns;
  });
  scope.variables["raise_exception"] = Value::callable("raise_exception", [](Renderer&, CallArgs& args) -> Value {
    const Bound a = bind(args, "raise_exception", {"message"});
    throw TemplateError(a[0] ? a[0]->str() : "raise_exception() was called", TemplateError::Cause::kRaised);
  });
  scope.variables["strftime_now"] = Value::callable("strftime_now", [](Renderer& renderer, CallArgs& args) {
    const Bound a = bind(args, "strftime_now", {"format"});
    if (!a[0]) fail("strftime_now() takes exactly one argument");
    const std::string& format = string_argument(*a[0], "strftime_now's format");
    if (format.size() > 256) fail("strftime_now(): the format is longer than 256 bytes");
    std::tm now{};
    if (renderer.options().now) {
      now = renderer.options().now();
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &now);
    }
    if (format.empty()) return Value::string("");
    std::string buffer(4096, '\0');
    const size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &now);
    if (n == 0) fail("strftime_now(): the format gives an empty or too long text");
    buffer.resize(n);
    return Value::string(std::move(buffer));
  });
}

}  // namespace hiq::jinja
