// Tests of core/status.h: Status, Result<T> and the propagation macros.
#include "core/status.h"

#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace hiq {
namespace {

TEST(Status, DefaultIsOk) {
  const Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  const Status s = invalid_argument("field 'x' must be positive");
  EXPECT_FALSE(s.is_ok());
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "field 'x' must be positive");
}

TEST(Status, ToStringPrefixesCodeName) {
  EXPECT_EQ(invalid_argument("msg").to_string(), "INVALID_ARGUMENT: msg");
  EXPECT_EQ(not_found("no file").to_string(), "NOT_FOUND: no file");
  EXPECT_EQ(out_of_range("too big").to_string(), "OUT_OF_RANGE: too big");
  EXPECT_EQ(internal_error("bug").to_string(), "INTERNAL: bug");
}

TEST(Status, HelpersMakeTheirCodes) {
  EXPECT_EQ(invalid_argument("m").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_found("m").code(), StatusCode::kNotFound);
  EXPECT_EQ(out_of_range("m").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(resource_exhausted("m").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(failed_precondition("m").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(unavailable("m").code(), StatusCode::kUnavailable);
  EXPECT_EQ(data_loss("m").code(), StatusCode::kDataLoss);
  EXPECT_EQ(internal_error("m").code(), StatusCode::kInternal);
}

TEST(Status, CodeNames) {
  EXPECT_EQ(status_code_name(StatusCode::kOk), "OK");
  EXPECT_EQ(status_code_name(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(status_code_name(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(status_code_name(StatusCode::kOutOfRange), "OUT_OF_RANGE");
  EXPECT_EQ(status_code_name(StatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(status_code_name(StatusCode::kFailedPrecondition), "FAILED_PRECONDITION");
  EXPECT_EQ(status_code_name(StatusCode::kUnavailable), "UNAVAILABLE");
  EXPECT_EQ(status_code_name(StatusCode::kDataLoss), "DATA_LOSS");
  EXPECT_EQ(status_code_name(StatusCode::kInternal), "INTERNAL");
}

TEST(Status, WithContextPrependsAndKeepsCode) {
  const Status base = not_found("cannot open");
  const Status s = base.with_context("config.json");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "config.json: cannot open");
  EXPECT_EQ(s.to_string(), "NOT_FOUND: config.json: cannot open");
  // The original is unchanged (with_context returns a copy).
  EXPECT_EQ(base.message(), "cannot open");
  // Contexts nest outermost first.
  EXPECT_EQ(s.with_context("--model").message(), "--model: config.json: cannot open");
}

TEST(Status, WithContextOnOkStaysOk) {
  const Status s = Status::ok().with_context("anything");
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(Result, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  EXPECT_TRUE(r.status().is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOk);
  r.value() = 7;  // mutable access
  EXPECT_EQ(*r, 7);
}

TEST(Result, HoldsError) {
  const Result<int> r = out_of_range("value 300 is above 255");
  ASSERT_FALSE(r.is_ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(), "value 300 is above 255");
}

TEST(Result, ArrowAndMoveOut) {
  Result<std::string> r = std::string("hello");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->size(), 5u);
  const Result<std::string>& cr = r;
  EXPECT_EQ(cr->front(), 'h');
  std::string moved = std::move(r).value();
  EXPECT_EQ(moved, "hello");
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.is_ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 5);
}

// ---- helpers for the macros ------------------------------------------------------

Result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return invalid_argument(std::string("not a digit: '") + c + "'");
  return c - '0';
}

Status check_even(int v) {
  if (v % 2 != 0) return out_of_range(std::to_string(v) + " is odd");
  return Status::ok();
}

// Two digits → a number, via HIQ_ASSIGN_OR_RETURN.
Result<int> parse_two_digits(char hi, char lo) {
  HIQ_ASSIGN_OR_RETURN(int h, parse_digit(hi));
  HIQ_ASSIGN_OR_RETURN(const int l, parse_digit(lo));  // two uses in one function
  return h * 10 + l;
}

// Counts how far it got, so a test can see that an error returns early.
Status parse_even_digit(char c, int* out, int* steps) {
  *steps = 0;
  HIQ_ASSIGN_OR_RETURN(*out, parse_digit(c));  // assigns into an existing lvalue
  ++*steps;
  HIQ_RETURN_IF_ERROR(check_even(*out));  // from a Status
  ++*steps;
  return Status::ok();
}

// HIQ_RETURN_IF_ERROR also accepts a Result and propagates its status.
Status digit_is_valid(char c) {
  HIQ_RETURN_IF_ERROR(parse_digit(c));
  return Status::ok();
}

Result<std::unique_ptr<int>> make_box(int v) {
  if (v < 0) return invalid_argument("negative");
  return std::make_unique<int>(v);
}

Result<int> unbox(int v) {
  HIQ_ASSIGN_OR_RETURN(std::unique_ptr<int> box, make_box(v));  // a move-only value
  return *box + 1;
}

TEST(Macros, AssignOrReturnPassesValues) {
  const Result<int> r = parse_two_digits('4', '2');
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, 42);
}

TEST(Macros, AssignOrReturnPropagatesFirstError) {
  const Result<int> first = parse_two_digits('x', '2');
  ASSERT_FALSE(first.is_ok());
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(first.status().message(), "not a digit: 'x'");

  const Result<int> second = parse_two_digits('4', 'y');
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().message(), "not a digit: 'y'");
}

TEST(Macros, AssignOrReturnMovesMoveOnlyValues) {
  const Result<int> ok = unbox(9);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, 10);
  const Result<int> bad = unbox(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "negative");
}

TEST(Macros, ReturnIfErrorPropagatesStatus) {
  int value = -1, steps = -1;
  EXPECT_TRUE(parse_even_digit('4', &value, &steps).is_ok());
  EXPECT_EQ(value, 4);
  EXPECT_EQ(steps, 2);

  const Status odd = parse_even_digit('3', &value, &steps);
  EXPECT_EQ(odd.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(odd.message(), "3 is odd");
  EXPECT_EQ(value, 3);
  EXPECT_EQ(steps, 1);  // returned at the second check

  const Status bad = parse_even_digit('z', &value, &steps);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(steps, 0);  // returned at the first step
}

TEST(Macros, ReturnIfErrorAcceptsResult) {
  EXPECT_TRUE(digit_is_valid('7').is_ok());
  const Status s = digit_is_valid('?');
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "INVALID_ARGUMENT: not a digit: '?'");
}

TEST(Macros, ReturnIfErrorWithContext) {
  const auto wrapped = [](char c) -> Status {
    HIQ_RETURN_IF_ERROR(digit_is_valid(c).with_context("--digit"));
    return Status::ok();
  };
  EXPECT_TRUE(wrapped('1').is_ok());
  EXPECT_EQ(wrapped('a').message(), "--digit: not a digit: 'a'");
}

}  // namespace
}  // namespace hiq
