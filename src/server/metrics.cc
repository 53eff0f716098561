#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <type_traits>

namespace hiq {
namespace {

template <typename M>
constexpr MetricType type_of() {
  if constexpr (std::is_same_v<M, Counter>) return MetricType::kCounter;
  else if constexpr (std::is_same_v<M, Gauge>) return MetricType::kGauge;
  else return MetricType::kHistogram;
}

// `{a="x",b="y"` without the closing brace (a histogram adds le), or "" when
// there are no labels and nothing to add.
std::string open_labels(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  if (names.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  return out;
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out += name;
  out += labels;
  out += ' ';
  out += format_metric_value(value);
  out += '\n';
}

// The sample names a family writes: a histogram's three and its own name,
// which a second family must not reuse.
std::vector<std::string> sample_names(const std::string& name, MetricType type) {
  if (type != MetricType::kHistogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

// ---- values ----------------------------------------------------------------------------------

void Counter::inc(double amount) {
  HIQ_CHECK_MSG(amount >= 0, "a counter only goes up");
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // lower_bound: the first bound ≥ v, so a value on a bound counts in that bucket (le = "less or equal").
  const size_t bucket = std::isnan(v) ? bounds_.size()
                                      : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                                            bounds_.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::string_view metric_type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// ---- families --------------------------------------------------------------------------------

template <typename M>
Family<M>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names)), bounds_(std::move(bounds)) {}

template <typename M>
M& Family<M>::with(const std::vector<std::string>& label_values) {
  HIQ_CHECK_MSG(label_values.size() == label_names_.size(), "one label value per label name");
  std::lock_guard lock(mutex_);
  auto& slot = series_[label_values];
  if (!slot) {
    if constexpr (std::is_same_v<M, Histogram>) slot = std::make_unique<Histogram>(bounds_);
    else slot = std::make_unique<M>();
  }
  return *slot;
}

template <typename M>
MetricType Family<M>::type() const {
  return type_of<M>();
}

template <typename M>
void Family<M>::render(std::string& out) const {
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + std::string(metric_type_name(type_of<M>())) + "\n";
  std::lock_guard lock(mutex_);
  for (const auto& [values, series] : series_) {
    std::string labels = open_labels(label_names_, values);
    if constexpr (std::is_same_v<M, Histogram>) {
      const Histogram::Snapshot s = series->snapshot();
      const std::string bucket_name = name_ + "_bucket";
      const std::string prefix = labels.empty() ? "{" : labels + ",";
      for (size_t i = 0; i <= s.bounds.size(); ++i) {
        const std::string le = i < s.bounds.size() ? format_metric_value(s.bounds[i]) : "+Inf";
        sample(out, bucket_name, prefix + "le=\"" + le + "\"}", static_cast<double>(s.cumulative[i]));
      }
      if (!labels.empty()) labels += '}';
      sample(out, name_ + "_sum", labels, s.sum);
      sample(out, name_ + "_count", labels, static_cast<double>(s.count));
    } else {
      if (!labels.empty()) labels += '}';
      sample(out, name_, labels, series->value());
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- the registry ----------------------------------------------------------------------------

template <typename M>
Result<Family<M>*> MetricsRegistry::add(std::string name, std::string help, std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  constexpr MetricType type = type_of<M>();
  if (!valid_metric_name(name))
    return invalid_argument("metric name '" + name + "' does not match [a-zA-Z_:][a-zA-Z0-9_:]*");
  std::set<std::string_view> seen;
  for (const std::string& label : label_names) {
    if (!valid_label_name(label) || label.starts_with("__"))
      return invalid_argument("metric '" + name + "': label name '" + label +
                              "' does not match [a-zA-Z_][a-zA-Z0-9_]* or starts with the reserved __");
    if (type == MetricType::kHistogram && label == "le")
      return invalid_argument("metric '" + name + "': 'le' is reserved for histogram buckets");
    if (!seen.insert(label).second) return invalid_argument("metric '" + name + "': label '" + label + "' repeats");
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      return invalid_argument("histogram '" + name + "': bucket bounds must be finite (+Inf is added)");
    if (i > 0 && !(bounds[i - 1] < bounds[i]))
      return invalid_argument("histogram '" + name + "': bucket bounds must increase strictly");
  }

  std::lock_guard lock(mutex_);
  for (const auto& family : families_) {
    for (const std::string& mine : sample_names(name, type))
      for (const std::string& theirs : sample_names(family->name(), family->type()))
        if (mine == theirs)
          return invalid_argument("metric '" + name + "' clashes with the registered metric '" + family->name() +
                                  "'");
  }
  auto family = std::unique_ptr<Family<M>>(
      new Family<M>(std::move(name), std::move(help), std::move(label_names), std::move(bounds)));
  Family<M>* raw = family.get();
  if (raw->label_names().empty()) raw->get();  // a family without labels always shows its one series
  families_.push_back(std::move(family));
  return raw;
}

Result<Family<Counter>*> MetricsRegistry::counter(std::string name, std::string help,
                                                  std::vector<std::string> label_names) {
  return add<Counter>(std::move(name), std::move(help), std::move(label_names), {});
}

Result<Family<Gauge>*> MetricsRegistry::gauge(std::string name, std::string help,
                                              std::vector<std::string> label_names) {
  return add<Gauge>(std::move(name), std::move(help), std::move(label_names), {});
}

Result<Family<Histogram>*> MetricsRegistry::histogram(std::string name, std::string help, std::vector<double> bounds,
                                                      std::vector<std::string> label_names) {
  return add<Histogram>(std::move(name), std::move(help), std::move(label_names), std::move(bounds));
}

std::string MetricsRegistry::render() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& family : families_) family->render(out);
  return out;
}

// ---- the text format -------------------------------------------------------------------------

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers print whole up to 2^53, where doubles stop holding every integer.
  if (v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

}  // namespace hiq
