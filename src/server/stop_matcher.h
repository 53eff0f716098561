// server/stop_matcher.h — finds the request's stop strings in text that
// arrives a few bytes at a time (one detokenized increment per generated
// token), and says how much of it can be sent to the client now.
//
// Text is held back while it could still turn out to be the start of a stop
// string ("Obs" with stop "Observation:"), because sent text cannot be taken
// back. Once a stop string is complete, the text before it is released and the
// stop string itself, with everything after it, is dropped (OpenAI's
// behaviour). An incomplete UTF-8 sequence at the end is held back too, so a
// character split across two tokens is never sent in halves. The held text
// is bounded by the longest stop string (and 3 bytes), so memory stays small.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hiq {

class StopMatcher {
 public:
  // Empty strings among `stop_strings` are ignored (the parser refuses them).
  explicit StopMatcher(std::vector<std::string> stop_strings);

  struct Step {
    std::string text;      // safe to send now; when `stopped`, the text before the stop string
    bool stopped = false;  // a stop string is complete: generation should end
  };

  // Feeds the next piece of generated text. After a stop, further feeds
  // return no text and stopped = true.
  Step feed(std::string_view increment);

  // Generation ended without a stop string: everything still held back.
  // Empty after a stop.
  std::string finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched first; empty until stopped.
  const std::string& matched() const { return matched_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t possible_stop_prefix() const;

  std::vector<std::string> stops_;
  std::string pending_;  // received, not yet released
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace hiq
