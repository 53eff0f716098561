#include "tokenizer/unicode_nfc.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

namespace hiq {

Result<std::string> to_nfc(std::string_view text) {
  // Below U+0300 there are no combining marks and no singleton
  // decompositions, so such text is its own NFC. In UTF-8 every byte of it is
  // below 0xCC (0xCC 0x80 is U+0300).
  bool maybe_changes = false;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0xCC) {
      maybe_changes = true;
      break;
    }
  }
  if (!maybe_changes) return std::string(text);

  utf8proc_uint8_t* composed = nullptr;
  // Without UTF8PROC_NULLTERM the length is taken as given, so NUL bytes are
  // ordinary characters. STABLE keeps unassigned code points as they are.
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &composed, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(composed, &std::free);
  if (length < 0) return internal_error(std::string("NFC normalization failed: ") + utf8proc_errmsg(length));
  return std::string(reinterpret_cast<const char*>(composed), static_cast<size_t>(length));
}

}  // namespace hiq
