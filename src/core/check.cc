#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace hiq::detail {

void check_failed(const char* condition, const char* file, int line, const char* message) {
  std::fprintf(stderr, "HIQ_CHECK failed at %s:%d: %s%s%s\n", file, line, condition,
               message ? " — " : "", message ? message : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace hiq::detail
