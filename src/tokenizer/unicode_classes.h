// tokenizer/unicode_classes.h — rewriting the character properties of a
// split pattern so that PCRE2 reads them as Oniguruma (Hugging Face) does.
//
// Two differences remain between the engines once the constructs that
// regex_split.h refuses are gone, and both change how real text splits:
//
//   - Unicode version. PCRE2 10.42 carries Unicode 14 tables; Oniguruma 6.9.8
//     (Hugging Face tokenizers) and utf8proc 2.8 carry Unicode 15.0. To PCRE2
//     the letters, digits and emoji assigned in 15.0 — CJK extension H,
//     Kawi, 🫨 🩷 🪿 — are unassigned, so \p{L} or \p{S} miss them and
//     DeepSeek-V3's pattern splits them differently. Each \p{X} of a general
//     category becomes [\p{X}<the code points utf8proc puts in X that PCRE2
//     does not>], found once per process by asking PCRE2 about every code
//     point utf8proc assigns.
//   - \s. PCRE2's \s has U+180E MONGOLIAN VOWEL SEPARATOR (a space until
//     Unicode 6.3); Oniguruma's \s is exactly White_Space. \s and \S become
//     explicit White_Space classes.
//
// Scripts (\p{Han}) and long names (\p{Letter}) are left to PCRE2. A code
// point whose category changed between Unicode 14 and 15 would still match
// its Unicode 14 category too; there are none (the tests check), and
// \p{C}/\p{Cn} still match the code points new in 15.0.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

// `pattern` with \p{..}, \P{..}, \pX, \PX of general categories and \s, \S
// rewritten as above; everything else unchanged. Errors (kInvalidArgument,
// naming `field`): a negated property or \S inside a character class when it
// would need code points added (a class cannot hold "not (A or B)").
Result<std::string> rewrite_unicode_classes(std::string_view pattern, std::string_view field);

// The number of code points that PCRE2 leaves out of the general category
// that utf8proc (Unicode 15.0) puts them in, and of those, the number PCRE2
// puts in another category rather than none. For tests.
size_t unicode_classes_added_code_points();
size_t unicode_classes_changed_code_points();

}  // namespace hiq
