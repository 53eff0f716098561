// template/parser.h — turns tokens into the statement tree of template/ast.h,
// refusing what the interpreter does not implement while parsing, so a model
// whose template needs it is caught when it is loaded, not on a request.
#pragma once

#include <string_view>

#include "template/ast.h"

namespace hiq::jinja {

struct ParseLimits {
  size_t max_source_bytes = 1 << 20;  // a chat template is a few KB; 1 MiB is far above any published one
  int max_nesting = 128;              // nested blocks plus nested expressions, so recursion stays shallow
};

// Throws TemplateError ("chat template line N: ...") for a syntax error or a
// construct outside the supported subset, naming it.
Body parse_template(std::string_view source, const ParseLimits& limits);

}  // namespace hiq::jinja
