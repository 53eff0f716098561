#include "tokenizer/added_tokens.h"

#include "core/check.h"

namespace hiq {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes_[node].children)
    if (b == byte) return next;
  return -1;
}

void AddedTokenMatcher::add(std::string_view pattern, int32_t value) {
  HIQ_CHECK_MSG(!pattern.empty() && value >= 0, "an added token needs content and an id");
  int32_t node = 0;
  for (char c : pattern) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  nodes_[node].value = value;
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, size_t from) const {
  for (size_t start = from; start < text.size(); ++start) {
    if (!first_byte_[static_cast<uint8_t>(text[start])]) continue;
    std::optional<Match> longest;
    int32_t node = 0;
    for (size_t i = start; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      if (nodes_[node].value >= 0) longest = Match{start, i + 1, nodes_[node].value};
    }
    if (longest) return longest;
  }
  return std::nullopt;
}

}  // namespace hiq
