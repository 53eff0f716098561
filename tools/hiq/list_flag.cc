#include "tools/hiq/list_flag.h"

#include <algorithm>
#include <charconv>
#include <iterator>

namespace hiq::cli {
namespace {

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

}  // namespace

Result<std::vector<std::string>> parse_list_flag(std::string_view text, std::string_view flag, ListRepeats repeats) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (item.empty())
      return invalid_argument(std::string(flag) + ": '" + std::string(text) + "' has an empty entry");
    if (repeats == ListRepeats::kRefuse) {
      for (const std::string& seen : out)
        if (seen == item) return invalid_argument(std::string(flag) + ": '" + std::string(item) + "' is given twice");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

Result<int64_t> parse_integer_item(std::string_view item, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = item.data() + item.size();
  const auto [ptr, ec] = std::from_chars(item.data(), end, value);
  const bool digits_only = !item.empty() && item.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits_only || ec != std::errc() || ptr != end || value < min || value > max)
    return invalid_argument("'" + std::string(item) + "' is not an integer from " + std::to_string(min) + " to " +
                            std::to_string(max));
  return value;
}

Result<std::vector<int64_t>> parse_integer_list_flag(std::string_view text, std::string_view flag, int64_t min,
                                                     int64_t max, ListRepeats repeats) {
  return parse_list_flag_as<int64_t>(
      text, flag, [&](const std::string& item) { return parse_integer_item(item, min, max); }, repeats);
}

Result<std::vector<CodecKind>> parse_codec_list_flag(std::string_view text, std::string_view flag) {
  if (text == "all") return std::vector<CodecKind>(std::begin(kAllCodecs), std::end(kAllCodecs));
  return parse_list_flag_as<CodecKind>(text, flag, [](const std::string& name) { return parse_codec(name); });
}

std::vector<std::string> join_kv_codec_items(const std::vector<std::string>& items) {
  const auto part_of = [](const std::string& item) { return item.size() > 1 && item[1] == '=' ? item[0] : '\0'; };
  std::vector<std::string> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].starts_with("tiered:")) {
      std::string ladder = items[i];
      // A suffix such as "/128" or "@cpu" ends the ladder.
      const auto codec_of = [](std::string_view item) { return parse_codec(item.substr(0, item.find_first_of("/@"))); };
      auto last = codec_of(std::string_view(ladder).substr(ladder.find(':') + 1));
      // A ladder has two rungs or more: the item after its first is always
      // its second (parse_host_codec then says whether it may be).
      for (size_t rungs = 1; last && ladder.find_first_of("/@") == std::string::npos && i + 1 < items.size();
           ++rungs) {
        const auto next = codec_of(items[i + 1]);
        if (!next || (rungs >= 2 && codec_value_bits(*next) >= codec_value_bits(*last))) break;
        ladder += "," + items[++i];
        last = next;
      }
      out.push_back(ladder);
      continue;
    }
    const char part = part_of(items[i]);
    if (part != '\0' && i + 1 < items.size() && part_of(items[i + 1]) != '\0' && part_of(items[i + 1]) != part) {
      out.push_back(items[i] + "," + items[i + 1]);
      ++i;
    } else {
      out.push_back(items[i]);
    }
  }
  return out;
}

Result<std::vector<KvCodecs>> parse_kv_codec_list_flag(std::string_view text, std::string_view flag) {
  if (text == "all") return std::vector<KvCodecs>(std::begin(kAllCodecs), std::end(kAllCodecs));
  HIQ_ASSIGN_OR_RETURN(const std::vector<std::string> items, parse_list_flag(text, flag, ListRepeats::kAllow));
  std::vector<KvCodecs> out;
  for (const std::string& spec : join_kv_codec_items(items)) {
    if (spec.starts_with("tiered:"))
      return invalid_argument(std::string(flag) + ": '" + spec + "' is a host tier of several codecs; this command " +
                              "takes codecs one by one: list the rungs instead (" + spec.substr(7) + ")");
    auto parsed = parse_kv_codecs(spec);
    if (!parsed) return parsed.status().with_context(flag);
    const KvCodecs codecs = *parsed;
    if (std::find(out.begin(), out.end(), codecs) != out.end())
      return invalid_argument(std::string(flag) + ": '" + codecs.name() + "' is given twice");
    out.push_back(codecs);
  }
  return out;
}

}  // namespace hiq::cli
