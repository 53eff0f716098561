#include "core/json_input.h"

#include <optional>
#include <unordered_set>
#include <vector>

namespace hiq {

using nlohmann::json;

std::string quote_for_message(std::string_view name, size_t max_bytes) {
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > max_bytes) out += "...";
  out += "'";
  return out;
}

std::string describe_json_value(const json& value) {
  constexpr size_t kMaxChars = 80;
  switch (value.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "nothing";
    default: break;
  }
  // A scalar: dump() is not recursive here, and the parser has already
  // rejected invalid UTF-8, so it cannot throw.
  std::string text = value.dump();
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

Result<json> parse_strict_json(std::string_view text, std::string_view source, int max_nesting,
                               std::string_view top_level_noun) {
  const std::string where(source);
  if (json_nesting_depth(text, max_nesting) > max_nesting)
    return data_loss(where + ": JSON nests more than " + std::to_string(max_nesting) + " levels deep");

  std::vector<std::unordered_set<std::string>> keys_of_open_objects;
  std::optional<std::string> duplicate;
  bool duplicate_at_top = false;
  const json::parser_callback_t on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !duplicate && !keys_of_open_objects.empty() &&
               parsed.is_string() && !keys_of_open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
      duplicate_at_top = keys_of_open_objects.size() == 1;
    }
    return true;  // keep every value: the callback only watches
  };
  json value = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  if (value.is_discarded()) return data_loss(where + ": not valid JSON");
  if (duplicate) {
    if (duplicate_at_top)
      return data_loss(where + ": " + std::string(top_level_noun) + " " + quote_for_message(*duplicate) +
                       " appears twice");
    return data_loss(where + ": key " + quote_for_message(*duplicate) + " appears twice in one object");
  }
  return value;
}

}  // namespace hiq
