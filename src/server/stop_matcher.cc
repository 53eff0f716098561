#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace hiq {
namespace {

// Where the incomplete UTF-8 sequence ending `text` starts, or text.size()
// when the text ends on a character boundary. Bytes that are not UTF-8 at
// all count as complete: holding them would not make them valid, and the
// JSON writer replaces them.
size_t incomplete_utf8_start(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t length = 0;                 // the length this lead byte announces
    if ((c & 0xE0) == 0xC0) length = 2;
    else if ((c & 0xF0) == 0xE0) length = 3;
    else if ((c & 0xF8) == 0xF0) length = 4;
    return length > back ? n - back : n;
  }
  return n;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

size_t StopMatcher::possible_stop_prefix() const {
  size_t longest = 0;
  for (const std::string& stop : stops_) {
    const size_t most = std::min(stop.size() - 1, pending_.size());
    for (size_t len = most; len > longest; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

StopMatcher::Step StopMatcher::feed(std::string_view increment) {
  Step step;
  if (stopped_) {
    step.stopped = true;
    return step;
  }
  pending_ += increment;

  // The earliest complete stop string wins. Released text never holds the
  // start of one, so searching what is pending is enough.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (first != std::string::npos) {
    step.text = pending_.substr(0, first);
    step.stopped = stopped_ = true;
    pending_.clear();
    return step;
  }

  size_t release = pending_.size() - possible_stop_prefix();
  release = incomplete_utf8_start(std::string_view(pending_).substr(0, release));
  step.text = pending_.substr(0, release);
  pending_.erase(0, release);
  return step;
}

std::string StopMatcher::finish() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace hiq
