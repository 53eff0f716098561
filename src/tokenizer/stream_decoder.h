// tokenizer/stream_decoder.h — incremental detokenization for streaming
// responses: ids go in one at a time as the model emits them, and only
// complete, well-formed UTF-8 comes out.
//
// A byte-level token may end in the middle of a character (an emoji is often
// two or three tokens), so the decoder holds back a trailing sequence that
// more bytes could still complete. Bytes that can never become well-formed
// are replaced by U+FFFD as soon as that is certain, one per maximal
// ill-formed subpart, so the concatenation of every feed() and the final
// flush() equals to_valid_utf8(tokenizer.decode(ids)) — which is Hugging
// Face's decode() for the same ids.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace hiq {

class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder. Special tokens are left out when
  // `skip_special`.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // The text that `id` completes; often empty while a character is open.
  // Ids without a token add nothing (as in decode).
  std::string feed(int32_t id);

  // The end of the stream: whatever is held back, with an unfinished
  // character as U+FFFD. The decoder is empty (reusable) afterwards.
  std::string flush();

  // Bytes held back, waiting for the rest of their character (≤ 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;  // not owned
  bool skip_special_;           // leave special tokens out
  std::string pending_;         // the start of a character that more bytes may complete
};

}  // namespace hiq
