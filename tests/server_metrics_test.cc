// Tests of server/metrics.h: the exact text a small registry renders, names
// and labels Prometheus would refuse, histogram buckets, escaping, and
// updates from several threads at once (run under TSan in CI).
#include "server/metrics.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"

namespace hiq {
namespace {

using testing::expect_error;

TEST(Metrics, RendersASmallRegistryExactly) {
  MetricsRegistry r;
  auto requests = r.counter("sglang:num_requests_total", "Requests finished.", {"finish_reason"});
  auto running = r.gauge("sglang:num_running_reqs", "Requests running now.");
  auto ttft = r.histogram("sglang:time_to_first_token_seconds", "Time to first token.", {0.125, 0.5, 2});
  ASSERT_TRUE(requests.is_ok() && running.is_ok() && ttft.is_ok());

  (*requests)->with({"stop"}).inc();
  (*requests)->with({"stop"}).inc(2);
  (*requests)->with({"length"}).inc();
  (*running)->get().set(3);
  (*running)->get().dec();
  Histogram& h = (*ttft)->get();
  h.observe(0.0625);
  h.observe(0.125);  // on a bound: counted in that bucket
  h.observe(0.25);
  h.observe(10);

  EXPECT_EQ(r.render(),
            "# HELP sglang:num_requests_total Requests finished.\n"
            "# TYPE sglang:num_requests_total counter\n"
            "sglang:num_requests_total{finish_reason=\"length\"} 1\n"
            "sglang:num_requests_total{finish_reason=\"stop\"} 3\n"
            "# HELP sglang:num_running_reqs Requests running now.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            "sglang:num_running_reqs 2\n"
            "# HELP sglang:time_to_first_token_seconds Time to first token.\n"
            "# TYPE sglang:time_to_first_token_seconds histogram\n"
            "sglang:time_to_first_token_seconds_bucket{le=\"0.125\"} 2\n"
            "sglang:time_to_first_token_seconds_bucket{le=\"0.5\"} 3\n"
            "sglang:time_to_first_token_seconds_bucket{le=\"2\"} 3\n"
            "sglang:time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"
            "sglang:time_to_first_token_seconds_sum 10.4375\n"
            "sglang:time_to_first_token_seconds_count 4\n");
}

TEST(Metrics, FamiliesWithoutLabelsStartAtZeroAndLabelledOnesEmpty) {
  MetricsRegistry r;
  ASSERT_TRUE(r.counter("a_total", "A.").is_ok());
  ASSERT_TRUE(r.gauge("b", "B.", {"tier"}).is_ok());
  ASSERT_TRUE(r.histogram("c", "C.", {}).is_ok());
  EXPECT_EQ(r.render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b B.\n# TYPE b gauge\n"
            "# HELP c C.\n# TYPE c histogram\nc_bucket{le=\"+Inf\"} 0\nc_sum 0\nc_count 0\n");
}

TEST(Metrics, HistogramWithLabels) {
  MetricsRegistry r;
  auto f = r.histogram("hiq_load_seconds", "Restore latency.", {0.25, 1}, {"codec", "tier"});
  ASSERT_TRUE(f.is_ok());
  Histogram& h = (*f)->with({"int8", "host"});
  h.observe(0.125);
  h.observe(0.5);
  h.observe(0.5);
  EXPECT_EQ(r.render(),
            "# HELP hiq_load_seconds Restore latency.\n"
            "# TYPE hiq_load_seconds histogram\n"
            "hiq_load_seconds_bucket{codec=\"int8\",tier=\"host\",le=\"0.25\"} 1\n"
            "hiq_load_seconds_bucket{codec=\"int8\",tier=\"host\",le=\"1\"} 3\n"
            "hiq_load_seconds_bucket{codec=\"int8\",tier=\"host\",le=\"+Inf\"} 3\n"
            "hiq_load_seconds_sum{codec=\"int8\",tier=\"host\"} 1.125\n"
            "hiq_load_seconds_count{codec=\"int8\",tier=\"host\"} 3\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndCountEqualsInf) {
  Histogram h({1, 2, 4, 8});
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 9.0, -3.0, std::numeric_limits<double>::infinity()}) h.observe(v);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{3, 5, 6, 8, 10}));
  EXPECT_EQ(s.count, 10u);
  EXPECT_TRUE(std::isinf(s.sum));
}

TEST(Metrics, NanObservationGoesToInfOnly) {
  Histogram h({1});
  h.observe(std::nan(""));
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry r;
  auto f = r.counter("x_total", "Help with \\ backslash\nand \"quotes\".", {"path"});
  ASSERT_TRUE(f.is_ok());
  (*f)->with({"C:\\dir\n\"q\""}).inc();
  EXPECT_EQ(r.render(),
            "# HELP x_total Help with \\\\ backslash\\nand \"quotes\".\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"C:\\\\dir\\n\\\"q\\\"\"} 1\n");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("a\"b\\c\nd"), "a\"b\\\\c\\nd");
}

TEST(Metrics, ValueFormatting) {
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(-0.0), "0");
  EXPECT_EQ(format_metric_value(42), "42");
  EXPECT_EQ(format_metric_value(-7), "-7");
  EXPECT_EQ(format_metric_value(0.25), "0.25");
  EXPECT_EQ(format_metric_value(1e-6), "1e-06");
  EXPECT_EQ(format_metric_value(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(format_metric_value(1e300), "1e+300");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
}

TEST(Metrics, NameValidation) {
  for (const char* ok : {"a", "_a", ":a", "sglang:cache_hit_rate", "hiq_l2_bytes_total", "A9:_"})
    EXPECT_TRUE(valid_metric_name(ok)) << ok;
  for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "é"}) EXPECT_FALSE(valid_metric_name(bad)) << bad;
  for (const char* ok : {"a", "_a", "tier", "le9"}) EXPECT_TRUE(valid_label_name(ok)) << ok;
  for (const char* bad : {"", "9a", "a:b", "a-b"}) EXPECT_FALSE(valid_label_name(bad)) << bad;
}

TEST(Metrics, RegistrationErrors) {
  MetricsRegistry r;
  expect_error(r.counter("bad-name", "x"), StatusCode::kInvalidArgument, {"'bad-name'", "[a-zA-Z_:]"});
  expect_error(r.gauge("g", "x", {"a:b"}), StatusCode::kInvalidArgument, {"label name 'a:b'"});
  expect_error(r.gauge("g", "x", {"__reserved"}), StatusCode::kInvalidArgument, {"'__reserved'"});
  expect_error(r.gauge("g", "x", {"a", "a"}), StatusCode::kInvalidArgument, {"label 'a' repeats"});
  expect_error(r.histogram("h", "x", {1}, {"le"}), StatusCode::kInvalidArgument, {"'le' is reserved"});
  EXPECT_TRUE(r.gauge("le_gauge", "a gauge may use le", {"le"}).is_ok());
  expect_error(r.histogram("h", "x", {1, 1}), StatusCode::kInvalidArgument, {"increase strictly"});
  expect_error(r.histogram("h", "x", {2, 1}), StatusCode::kInvalidArgument, {"increase strictly"});
  expect_error(r.histogram("h", "x", {1, std::numeric_limits<double>::infinity()}), StatusCode::kInvalidArgument,
               {"finite"});
  expect_error(r.histogram("h", "x", {std::nan("")}), StatusCode::kInvalidArgument, {"finite"});

  ASSERT_TRUE(r.counter("dup", "x").is_ok());
  expect_error(r.counter("dup", "x"), StatusCode::kInvalidArgument, {"'dup'", "clashes"});
  expect_error(r.gauge("dup", "x"), StatusCode::kInvalidArgument, {"clashes"});
  ASSERT_TRUE(r.histogram("lat", "x", {1}).is_ok());
  expect_error(r.counter("lat_count", "x"), StatusCode::kInvalidArgument, {"'lat_count'", "'lat'"});
  ASSERT_TRUE(r.counter("req_sum", "x").is_ok());
  expect_error(r.histogram("req", "x", {1}), StatusCode::kInvalidArgument, {"'req_sum'"});
  // Nothing refused was registered.
  EXPECT_EQ(r.render().find("# HELP h "), std::string::npos);
}

TEST(Metrics, SeriesReferencesStayValid) {
  MetricsRegistry r;
  auto f = r.counter("c_total", "x", {"k"});
  ASSERT_TRUE(f.is_ok());
  Counter& first = (*f)->with({"0"});
  for (int i = 1; i < 1000; ++i) (*f)->with({std::to_string(i)}).inc();
  first.inc(5);
  EXPECT_EQ(&first, &(*f)->with({"0"}));
  EXPECT_EQ((*f)->with({"0"}).value(), 5);
}

TEST(Metrics, GaugeGoesBothWays) {
  Gauge g;
  g.inc(2.5);
  g.dec(4);
  EXPECT_EQ(g.value(), -1.5);
  g.set(7);
  EXPECT_EQ(g.value(), 7);
}

// Several threads update shared series and create new ones while another
// renders; nothing is lost and TSan sees no race.
TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry r;
  auto counter = r.counter("ops_total", "x", {"thread"});
  auto shared = r.counter("shared_total", "x");
  auto gauge = r.gauge("level", "x");
  auto hist = r.histogram("sizes", "x", {10, 100});
  ASSERT_TRUE(counter.is_ok() && shared.is_ok() && gauge.is_ok() && hist.is_ok());

  constexpr int kThreads = 4, kOps = 20000;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    while (!done.load()) {
      const std::string text = r.render();
      EXPECT_NE(text.find("# TYPE sizes histogram"), std::string::npos);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      Counter& mine = (*counter)->with({std::to_string(t)});
      for (int i = 0; i < kOps; ++i) {
        mine.inc();
        (*shared)->get().inc();
        (*gauge)->get().inc();
        (*gauge)->get().dec(0.5);
        (*hist)->get().observe(i % 200);
        if (i % 1000 == 0) (*counter)->with({std::to_string(t)}).inc(0);  // lookups race with renders
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  renderer.join();

  for (int t = 0; t < kThreads; ++t) EXPECT_EQ((*counter)->with({std::to_string(t)}).value(), kOps);
  EXPECT_EQ((*shared)->get().value(), kThreads * kOps);
  EXPECT_EQ((*gauge)->get().value(), kThreads * kOps * 0.5);
  const auto s = (*hist)->get().snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kOps));
  // Per thread: i % 200 in [0, 10] eleven times per 200, [11, 100] ninety times.
  EXPECT_EQ(s.cumulative[0], static_cast<uint64_t>(kThreads * kOps / 200 * 11));
  EXPECT_EQ(s.cumulative[1], static_cast<uint64_t>(kThreads * kOps / 200 * 101));
  EXPECT_EQ(s.sum, static_cast<double>(kThreads) * (kOps / 200) * (199 * 200 / 2));
}

}  // namespace
}  // namespace hiq
