#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace hiq {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::feed(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  const std::string_view bytes = tokenizer_->token_bytes(id);
  if (bytes.empty()) return {};
  pending_ += bytes;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const Utf8Step step = utf8_step(pending_, pos);
    if (step.kind == Utf8Step::Kind::kIncomplete) break;  // held back for the next id
    if (step.kind == Utf8Step::Kind::kValid) out.append(pending_, pos, step.length);
    else out.append(kReplacementCharacter);
    pos += step.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = to_valid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace hiq
