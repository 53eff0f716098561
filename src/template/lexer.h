// template/lexer.h — splits a template into text and the tokens of its
// tags, applying whitespace control exactly as jinja2's lexer does with
// trim_blocks=True and lstrip_blocks=True (Hugging Face's settings):
//
//   * newlines are normalised to "\n" and one trailing newline is dropped
//     (keep_trailing_newline=False);
//   * `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}`
//     all whitespace after it;
//   * trim_blocks: the first newline after a block or comment tag is removed;
//   * lstrip_blocks: spaces and tabs from the start of a line up to a block
//     or comment tag are removed (`{%+` keeps them);
//   * `{% raw %}…{% endraw %}` is text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hiq::jinja {

struct Token {
  enum class Type { kText, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd, kName, kString, kInteger, kFloat,
                    kOperator, kEnd };
  Type type = Type::kEnd;
  std::string text;  // text, name, operator, or a string literal's value
  int line = 1;
  int64_t integer = 0;
  double floating = 0;
};

// Throws TemplateError ("chat template line N: ...") for an unterminated tag,
// comment or string, an unknown character, or source that is not UTF-8.
std::vector<Token> tokenize(std::string_view source);

}  // namespace hiq::jinja
