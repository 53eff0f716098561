// core/json_nesting.h — how deeply a JSON text nests, measured on the raw
// bytes, so that parsers of outside input (config.json, request bodies) can
// refuse a hostile depth before building a tree.
#pragma once

#include <algorithm>
#include <string_view>

namespace hiq {

// The deepest nesting of objects and arrays in `text`, counting brackets
// outside strings; stops once `limit` is passed.
inline int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace hiq
