// tools/hiq/list_flag.h — the one parser of comma-separated flag values
// (--hicache-codec, --batches, --prefill, --compare, --prompt-ids, …).
//
// The rule, for every list flag of hiq:
//   - items are separated by ',';
//   - spaces and tabs around an item are trimmed: "int8, int4h" is "int8,int4h";
//   - an empty item is an error, whether the list is empty or an item is
//     ("", "int8,", "int8,,int4h", " , "): a stray comma is a typo, not a default;
//   - a repeated item is an error ("int8,int8", and "1,01" for numbers: values
//     are compared after parsing), except in a sequence whose order and
//     repeats are the data (ListRepeats::kAllow: --prompt-ids).
// Errors name the flag: "--hicache-codec: 'int8' is given twice".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "core/status.h"

namespace hiq::cli {

enum class ListRepeats : uint8_t {
  kRefuse,  // a set of choices: naming one twice is a mistake
  kAllow,   // a sequence: repeats are data
};

// The trimmed items of `text`, in order.
Result<std::vector<std::string>> parse_list_flag(std::string_view text, std::string_view flag,
                                                 ListRepeats repeats = ListRepeats::kRefuse);

// An integer item in [min, max], written in decimal digits only; the error
// gives the range (the list parser adds the flag).
Result<int64_t> parse_integer_item(std::string_view item, int64_t min, int64_t max);

// The items of `text`, each converted by `parse_item`; an item's error is
// given the flag as context. With ListRepeats::kRefuse, two items that convert
// to equal values are an error.
template <class T>
Result<std::vector<T>> parse_list_flag_as(std::string_view text, std::string_view flag,
                                          const std::function<Result<T>(const std::string&)>& parse_item,
                                          ListRepeats repeats = ListRepeats::kRefuse) {
  HIQ_ASSIGN_OR_RETURN(std::vector<std::string> items, parse_list_flag(text, flag, ListRepeats::kAllow));
  std::vector<T> out;
  out.reserve(items.size());
  for (const std::string& item : items) {
    Result<T> value = parse_item(item);
    if (!value.is_ok()) return value.status().with_context(flag);
    if (repeats == ListRepeats::kRefuse) {
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i] == *value)
          return invalid_argument(std::string(flag) + ": '" + item + "' is given twice" +
                                  (items[i] == item ? std::string() : " (as '" + items[i] + "')"));
    }
    out.push_back(*std::move(value));
  }
  return out;
}

// A list of integers in [min, max].
Result<std::vector<int64_t>> parse_integer_list_flag(std::string_view text, std::string_view flag, int64_t min,
                                                     int64_t max, ListRepeats repeats = ListRepeats::kRefuse);

// A list of codec names (bf16, int8, fp8, int4, int4h), or "all" for every codec.
Result<std::vector<CodecKind>> parse_codec_list_flag(std::string_view text, std::string_view flag);
// The items of a codec list with each K/V pair joined into one: a "k=…" item
// and the "v=…" item right after it (or the other way round) become
// "k=…,v=…" (text after either, such as "/128", stays where it was); a
// ladder "tiered:int8" takes the codec name after it, then the next ones
// while each has fewer bits per value than the one before ("tiered:int8",
// "int4h", "bf16" become "tiered:int8,int4h" and "bf16"), up to the first
// item with a suffix ("/128", "@cpu").
std::vector<std::string> join_kv_codec_items(const std::vector<std::string>& items);
// A list of host-tier codecs: names as above, and K/V pairs written as
// parse_kv_codecs takes them ("k=int8,v=int4h": a k= item and the v= item
// after it, or the other way round, are one entry). "all": every single codec.
Result<std::vector<KvCodecs>> parse_kv_codec_list_flag(std::string_view text, std::string_view flag);

}  // namespace hiq::cli
