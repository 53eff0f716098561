// server/metrics.h — a small Prometheus registry for `hiq serve`'s /metrics:
// counters, gauges and histograms, each a family of series told apart by
// label values, rendered in the text exposition format 0.0.4.
//
// Names follow Prometheus: [a-zA-Z_:][a-zA-Z0-9_:]* for metrics (so SGLang's
// "sglang:cache_hit_rate"-style names work) and [a-zA-Z_][a-zA-Z0-9_]* for
// labels, minus the reserved "__" prefix and, on histograms, "le".
//
// Threads: registering a family and looking up a series take a mutex; updating
// a series is lock-free (atomics), so a hot path looks its series up once and
// keeps the reference. Families and series live as long as the registry and
// never move. render() may run concurrently with updates: each value it
// prints is one that was current during the call, and a histogram's _count is
// always the sum of its buckets (its _sum may lag by the observations in flight).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hiq {

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };
std::string_view metric_type_name(MetricType type);  // "counter", "gauge", "histogram"

class Counter {
 public:
  // `amount` must be ≥ 0 (a counter only goes up; checked).
  void inc(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  void dec(double amount = 1.0) { value_.fetch_sub(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds` are the upper bounds of the finite buckets, strictly increasing
  // (the registry checks them); +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);

  // Counts `v` in the first bucket whose bound is ≥ v (NaN: only in +Inf).
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;         // finite upper bounds
    std::vector<uint64_t> cumulative;   // bounds.size() + 1 counts, the last for +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative), bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// What the registry keeps of every family, whatever its type.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  virtual MetricType type() const = 0;
  // Appends the family's # HELP, # TYPE and sample lines to `out`.
  virtual void render(std::string& out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  std::string name_, help_;
  std::vector<std::string> label_names_;
};

// One metric name: its help text, label names and a series per label-value
// tuple, created on first use. M is Counter, Gauge or Histogram.
template <typename M>
class Family final : public FamilyBase {
 public:
  // The series for `label_values`, one per label name in order; created (at
  // zero) on first use. A wrong number of values is a programmer error (checked).
  M& with(const std::vector<std::string>& label_values);
  // The series of a family without labels.
  M& get() { return with({}); }

  MetricType type() const override;
  void render(std::string& out) const override;

 private:
  friend class MetricsRegistry;
  Family(std::string name, std::string help, std::vector<std::string> label_names, std::vector<double> bounds);

  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mutex_;    // guards series_ (the map), not the values
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;
};

// Owns every family; /metrics renders it. Registering a name twice, or a name
// or label Prometheus would refuse, is an error (kInvalidArgument) that names it.
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Result<Family<Counter>*> counter(std::string name, std::string help, std::vector<std::string> label_names = {});
  Result<Family<Gauge>*> gauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  // `bounds`: finite, strictly increasing upper bounds (+Inf is added).
  Result<Family<Histogram>*> histogram(std::string name, std::string help, std::vector<double> bounds,
                                       std::vector<std::string> label_names = {});

  // Every family in registration order, each series in label-value order:
  //   # HELP <name> <help>
  //   # TYPE <name> <type>
  //   <name>{<label>="<value>",...} <value>
  // Histograms as <name>_bucket{...,le="<bound>"} (cumulative, ending at
  // le="+Inf"), <name>_sum and <name>_count. A family without labels always
  // has its one series (at zero until updated); a labelled family shows only
  // series that were used.
  std::string render() const;

 private:
  template <typename M>
  Result<Family<M>*> add(std::string name, std::string help, std::vector<std::string> label_names,
                         std::vector<double> bounds);

  mutable std::mutex mutex_;  // guards families_
  std::vector<std::unique_ptr<FamilyBase>> families_;
};

// Checks against Prometheus' grammar.
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

// Text-format escaping: help text escapes \ and newline; label values also ".
std::string escape_help(std::string_view help);
std::string escape_label_value(std::string_view value);
// A sample value as Prometheus writes it: integers without a fraction
// ("42"), others in shortest round-trip form ("0.25", "1e-06"), and
// "+Inf", "-Inf", "NaN".
std::string format_metric_value(double v);

}  // namespace hiq
