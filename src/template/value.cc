#include "template/value.h"

#include <algorithm>
#include <cmath>

#include "template/py_str.h"

namespace hiq::jinja {

Value Value::undefined(std::string name) {
  Value v;
  v.object_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.object_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.object_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.object_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::callable(std::string name, std::function<Value(Renderer&, CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.object_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::make_namespace(Dict attributes) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.object_ = std::make_shared<Namespace>(Namespace{std::move(attributes)});
  return v;
}

namespace {

template <typename Json>
Value value_from_json(const Json& j, int depth) {
  if (depth > 512) throw TemplateError("the template's input nests JSON deeper than 512 levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) throw TemplateError("the integer " + j.dump() + " is too large");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Value::List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(value_from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [key, item] : j.items()) d.set(Value::string(key), value_from_json(item, depth + 1));
      return Value::dict(std::move(d));
    }
    default: throw TemplateError("a JSON value of type " + std::string(j.type_name()) + " has no template value");
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j, 0); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 0); }

const std::string& Value::as_string() const {
  static const std::string empty;
  return object_ ? *static_cast<const std::string*>(object_.get()) : empty;
}
const Value::List& Value::as_list() const { return *static_cast<const List*>(object_.get()); }
const Dict& Value::as_dict() const { return *static_cast<const Dict*>(object_.get()); }
const Callable& Value::as_callable() const { return *static_cast<const Callable*>(object_.get()); }
Namespace& Value::as_namespace() const {
  // Namespaces are created mutable (make_namespace); object_ only erases the type.
  return *const_cast<Namespace*>(static_cast<const Namespace*>(object_.get()));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return as_dict().size() != 0;
    case Kind::kCallable: case Kind::kNamespace: return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return repr();
  }
}

std::string Value::repr(int depth) const {
  if (depth > 512) throw TemplateError("repr: the value nests deeper than 512 levels");
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return int_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return py::float_repr(float_);
    case Kind::kString: return py::repr(as_string());
    case Kind::kList: {
      const List& items = as_list();
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += items[i].repr(depth + 1);
      }
      if (tuple_ && items.size() == 1) out += ',';
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : as_dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += key.repr(depth + 1) + ": " + value.repr(depth + 1);
      }
      return out + "}";
    }
    case Kind::kCallable: return "<function " + as_callable().name + ">";
    case Kind::kNamespace: return "<Namespace " + Value::dict(as_namespace().attributes).repr(depth + 1) + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
    case Kind::kNamespace: return "Namespace";
  }
  return "object";
}

std::string Value::undefined_message() const {
  const std::string& message = as_string();
  return message.empty() ? "a value is undefined" : message;
}

bool operator==(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.int_ == b.int_;
  }
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    case Kind::kList: return a.tuple_ == b.tuple_ && a.as_list() == b.as_list();
    case Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.items()) {
        const Value* other = y.find(key);
        if (!other || !(*other == value)) return false;
      }
      return true;
    }
    default: return a.object_ == b.object_;
  }
}

const Value* Dict::find(std::string_view key) const {
  const auto it = string_index_.find(std::string(key));
  return it == string_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.is_string()) {
    const auto [it, inserted] = string_index_.emplace(key.as_string(), items_.size());
    if (!inserted) {
      items_[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& [k, v] : items_) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 bytes order as code points do
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!(x[i] == y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) throw TemplateError(a.undefined_message());
  if (b.is_undefined()) throw TemplateError(b.undefined_message());
  throw TemplateError("'<' is not supported between '" + a.type_name() + "' and '" + b.type_name() + "'");
}

namespace {

void dump_json_to(std::string& out, const Value& value, const JsonDumpOptions& options, int depth);

void newline_indent(std::string& out, const JsonDumpOptions& options, int depth) {
  out += '\n';
  for (int i = 0; i < depth; ++i) out += *options.indent;
}

std::string json_key(const Value& key, const JsonDumpOptions& options) {
  std::string out;
  switch (key.kind()) {
    case Value::Kind::kString: py::append_json_string(out, key.as_string(), options.ensure_ascii); return out;
    case Value::Kind::kNone: return "\"null\"";
    case Value::Kind::kBool: return key.as_bool() ? "\"true\"" : "\"false\"";
    case Value::Kind::kInt: return "\"" + std::to_string(key.as_int()) + "\"";
    case Value::Kind::kFloat: return "\"" + py::float_repr(key.as_float()) + "\"";
    default: throw TemplateError("keys must be str, int, float, bool or None, not " + key.type_name());
  }
}

void dump_json_to(std::string& out, const Value& value, const JsonDumpOptions& options, int depth) {
  if (depth > 512) throw TemplateError("tojson: the value is nested too deeply");
  switch (value.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
    case Value::Kind::kFloat: {
      const double f = value.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += py::float_repr(f);
      return;
    }
    case Value::Kind::kString: py::append_json_string(out, value.as_string(), options.ensure_ascii); return;
    case Value::Kind::kList: {
      const auto& items = value.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += options.item_separator;
        if (options.indent) newline_indent(out, options, depth + 1);
        dump_json_to(out, items[i], options, depth + 1);
      }
      if (options.indent) newline_indent(out, options, depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = value.as_dict();
      if (d.size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : d.items()) entries.push_back(&entry);
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* x, const auto* y) { return compare(x->first, y->first) < 0; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += options.item_separator;
        if (options.indent) newline_indent(out, options, depth + 1);
        out += json_key(entries[i]->first, options);
        out += options.key_separator;
        dump_json_to(out, entries[i]->second, options, depth + 1);
      }
      if (options.indent) newline_indent(out, options, depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined:
      throw TemplateError("tojson: Object of type Undefined is not JSON serializable (" + value.undefined_message() +
                          ")");
    default: throw TemplateError("tojson: Object of type " + value.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump_json_to(out, value, options, 0);
  return out;
}

}  // namespace hiq::jinja
