#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

namespace hiq {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_sink_mutex;
LogSink g_sink;  // guarded by g_sink_mutex

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  char out[48];
  std::snprintf(out, sizeof out, "%.*s.%03dZ", static_cast<int>(n), buf, static_cast<int>(millis));
  return out;
}

}  // namespace

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "unknown";
}

Result<LogLevel> parse_log_level(std::string_view name) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff})
    if (name == log_level_name(l)) return l;
  return invalid_argument("log level '" + std::string(name) + "' is not known; the levels are debug, info, warning, "
                          "error and off");
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void log(LogLevel level, std::string_view component, std::string_view message) {
  if (!log_enabled(level)) return;
  {
    std::lock_guard lock(g_sink_mutex);
    if (g_sink) {
      g_sink(level, component, message);
      return;
    }
  }
  std::string line = "hiq " + timestamp() + " " + std::string(log_level_name(level)) + " " + std::string(component) +
                     ": " + std::string(message) + "\n";
  // One write: lines from several threads never mix.
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void set_log_sink(LogSink sink) {
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(sink);
}

}  // namespace hiq
