// tokenizer/added_tokens.h — finding added tokens ("<|im_start|>", "<think>")
// in text, before pre-tokenization cuts it into words.
//
// Matching is Hugging Face's (daachorse, MatchKind::LeftmostLongest): the
// match that starts first wins, and of those starting there the longest;
// the search goes on after its end. A byte trie is enough: a tokenizer has
// tens to a few hundred added tokens of a few dozen bytes each.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace hiq {

class AddedTokenMatcher {
 public:
  // One occurrence of a pattern in a text.
  struct Match {
    size_t start = 0;   // byte offset of its first byte
    size_t end = 0;     // one past its last byte
    int32_t value = 0;  // what add() was given with the pattern
  };

  // Adds a non-empty pattern; adding one twice keeps the later value.
  void add(std::string_view pattern, int32_t value);
  bool empty() const { return nodes_.size() <= 1; }

  // The leftmost-longest match starting at or after `from`, if any.
  std::optional<Match> find(std::string_view text, size_t from) const;

 private:
  // One trie node: the patterns that share its path from the root as prefix.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // next byte → node index
    int32_t value = -1;                                 // ≥ 0 when a pattern ends here
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};   // [0] is the root
  std::array<bool, 256> first_byte_{};  // bytes some pattern starts with: skip the rest quickly
};

}  // namespace hiq
