#include "server/reasoning_parser.h"

namespace hiq {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

Result<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  if (name.empty()) return ReasoningFormat::kNone;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek-r1") return ReasoningFormat::kDeepSeekR1;
  return invalid_argument("reasoning parser '" + std::string(name) + "' is not known; the parsers are qwen3 and deepseek-r1");
}

ReasoningSplitter::ReasoningSplitter(ReasoningFormat format)
    : format_(format), state_(format == ReasoningFormat::kNone ? State::kContent : State::kStart) {}

void ReasoningSplitter::drop_leading_space() {
  if (!skip_space_) return;
  size_t i = 0;
  while (i < held_.size() && is_space(held_[i])) ++i;
  held_.erase(0, i);
  if (!held_.empty()) skip_space_ = false;
}

ReasoningSplitter::Piece ReasoningSplitter::feed(std::string_view text) {
  Piece out;
  held_ += text;
  while (true) {
    if (state_ == State::kStart) {
      // Decide once the text is known to start, or not, with <think>.
      if (held_.size() < kOpen.size() && kOpen.starts_with(held_)) return out;
      if (held_.starts_with(kOpen)) {
        held_.erase(0, kOpen.size());
        state_ = State::kThinking;
        skip_space_ = true;
      } else if (format_ == ReasoningFormat::kDeepSeekR1) {
        state_ = State::kThinking;
        skip_space_ = true;
      } else {
        state_ = State::kContent;  // no thinking: the answer as it is
      }
      continue;
    }
    drop_leading_space();
    if (state_ == State::kContent) {
      out.content += held_;
      held_.clear();
      return out;
    }
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = partial_tag(held_, kClose);
      out.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning += held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    state_ = State::kContent;
    skip_space_ = true;
  }
}

ReasoningSplitter::Piece ReasoningSplitter::finish() {
  Piece out;
  if (state_ == State::kStart) state_ = State::kContent;  // a short answer that looked like a tag's start
  if (state_ == State::kThinking) out.reasoning = std::move(held_);
  else out.content = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace hiq
