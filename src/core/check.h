// core/check.h — checks for programmer errors (broken invariants, not bad input).
//
// Bad input is reported with a Status; a failed HIQ_CHECK means the program
// itself is wrong, so it prints the condition with file and line and aborts.
// HIQ_DCHECK compiles away in release builds (NDEBUG).
#pragma once

namespace hiq::detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line, const char* message);
}  // namespace hiq::detail

#define HIQ_CHECK_MSG(cond, msg)                                          \
  do {                                                                    \
    if (!(cond)) [[unlikely]]                                             \
      ::hiq::detail::check_failed(#cond, __FILE__, __LINE__, (msg));      \
  } while (0)
#define HIQ_CHECK(cond) HIQ_CHECK_MSG(cond, nullptr)

#ifdef NDEBUG
#define HIQ_DCHECK(cond) \
  do {                   \
  } while (false && (cond))
#else
#define HIQ_DCHECK(cond) HIQ_CHECK(cond)
#endif
