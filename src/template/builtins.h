// template/builtins.h — jinja2's filters, tests and global functions, and
// Python's str/dict/list methods, as far as chat templates use them.
#pragma once

#include <string>
#include <string_view>

#include "template/value.h"

namespace hiq::jinja {

bool is_supported_filter(std::string_view name);
bool is_supported_test(std::string_view name);
// A jinja2 built-in filter or test we refuse (for a clearer message than "unknown").
bool is_jinja_filter(std::string_view name);
bool is_jinja_test(std::string_view name);

Value apply_filter(Renderer& renderer, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Renderer& renderer, const std::string& name, const Value& input, CallArgs& args);

// x.name as jinja2's sandboxed getattr does it: an attribute (a method) first,
// then the item; undefined when neither exists.
Value get_attribute(const Value& object, const std::string& name);
// x[key]: the item first, then (for a string key) the attribute.
Value get_item(const Value& object, const Value& key);
// x[start:stop:step] for strings and lists; absent bounds are undefined values.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// The items a for loop walks: a list's items, a dict's keys, a string's
// characters; nothing for undefined.
Value::List iterate(const Value& value);

}  // namespace hiq::jinja

namespace hiq::jinja {

// Adds the globals of Hugging Face's environment to `scope`: range, dict,
// namespace, raise_exception, strftime_now.
struct Scope;
void add_globals(Scope& scope);

}  // namespace hiq::jinja
