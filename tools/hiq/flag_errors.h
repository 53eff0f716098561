// tools/hiq/flag_errors.h — a configuration's validation error, which names
// the field ("page_size must be ..."), rewritten to name the flag the user
// typed ("--page-size must be ..."). Library errors never name flags; this is
// the one place that knows both names.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace hiq::cli {

using FieldFlag = std::pair<std::string_view, std::string_view>;  // config field, flag

inline Status with_flag_names(const Status& status, std::initializer_list<FieldFlag> fields) {
  if (status.is_ok()) return status;
  const std::string& message = status.message();
  for (const auto& [field, flag] : fields)
    if (message.starts_with(field) && message.size() > field.size() && message[field.size()] == ' ')
      return {status.code(), std::string(flag) + message.substr(field.size())};
  return status;
}

}  // namespace hiq::cli
