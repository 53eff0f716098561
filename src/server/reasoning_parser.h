// server/reasoning_parser.h — splits a reasoning model's output into its
// thinking and its answer, for chat's `reasoning_content` (SGLang's and
// vLLM's --reasoning-parser).
//
//   qwen3        thinking is a leading <think>…</think> block; output that
//                does not start with <think> is all answer (Qwen3 with
//                enable_thinking false, or a model that skipped it).
//   deepseek-r1  the output starts inside the thinking (the template opened
//                <think>); everything up to </think> is thinking. A leading
//                <think> is dropped too.
//
// Works on text as it streams: feed() releases only what is decided, holding
// back a tail that may be the start of a tag; the whole text fed at once
// gives the same pieces, concatenated, as fed in any increments. Whitespace
// right after <think> and right after </think> is dropped (templates put
// newlines there); the tags never appear in either part.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

enum class ReasoningFormat { kNone, kQwen3, kDeepSeekR1 };

// "qwen3" or "deepseek-r1"; "" is kNone. Errors (kInvalidArgument): any other name.
Result<ReasoningFormat> parse_reasoning_format(std::string_view name);

class ReasoningSplitter {
 public:
  struct Piece {
    std::string reasoning;
    std::string content;
  };

  explicit ReasoningSplitter(ReasoningFormat format);
  // What the new text decides.
  Piece feed(std::string_view text);
  // The rest, at the end of the output (an unclosed block's text is thinking).
  Piece finish();

 private:
  enum class State { kStart, kThinking, kContent };
  void drop_leading_space();

  ReasoningFormat format_;
  State state_;
  bool skip_space_ = false;  // drop whitespace at the start of the current part
  std::string held_;         // undecided text
};

}  // namespace hiq
