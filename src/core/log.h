// core/log.h — leveled logging for what an operator must see: engine and
// transfer errors, requests failed by the server, shutdown. One line per
// event on stderr ("hiq 2026-12-01T14:30:05.123Z error engine: ..."), written
// with one call so lines from many threads never interleave.
//
// The level is process-wide (set once from --log-level); messages below it
// cost one atomic load. Tests capture lines with a sink instead of stderr.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

// "debug", "info", "warning", "error".
std::string_view log_level_name(LogLevel level);
// The names above, and "off". Errors (kInvalidArgument): any other.
Result<LogLevel> parse_log_level(std::string_view name);

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return level >= log_level() && level != LogLevel::kOff; }

// Writes one line if `level` is enabled. `component` names the module
// ("engine", "transfer", "http", "serve").
void log(LogLevel level, std::string_view component, std::string_view message);

// Where lines go instead of stderr (null: stderr again). For tests.
using LogSink = std::function<void(LogLevel level, std::string_view component, std::string_view message)>;
void set_log_sink(LogSink sink);

}  // namespace hiq
