// tests/expect_error.h — the assertion the error-path tests share.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hiq::testing {

inline bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// Expects `r` to have failed with `code` and a message holding every one of `needles`.
template <typename T>
void expect_error(const Result<T>& r, StatusCode code, std::initializer_list<std::string_view> needles) {
  ASSERT_FALSE(r.is_ok()) << "expected an error holding '" << *needles.begin() << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (std::string_view needle : needles)
    EXPECT_TRUE(contains(r.status().message(), needle)) << "message lacks '" << needle << "': " << r.status().message();
}

}  // namespace hiq::testing
