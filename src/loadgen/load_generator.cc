#include "loadgen/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

namespace hiq {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

LatencySummary summarize(std::vector<double> v) {
  LatencySummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  s.max = v.back();
  return s;
}

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<TokenId> output;
  double ttft = 0, e2e = 0;
  std::vector<double> gaps;
  uint64_t prompt_tokens = 0, cached_device = 0, cached_host = 0, cached_storage = 0;
};

// One streaming completion; the events are parsed as they arrive.
Outcome send(httplib::Client& client, const LoadOptions& o, const Request& r) {
  Outcome out;
  const nlohmann::json body = {{"prompt", r.prompt}, {"max_tokens", r.max_new_tokens}, {"temperature", 0},
                               {"ignore_eos", true}, {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!o.api_key.empty()) req.set_header("Authorization", "Bearer " + o.api_key);
  const auto start = Clock::now();
  auto last = start;
  std::string buffer;
  bool first = true;
  req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    buffer.append(data, length);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const nlohmann::json chunk = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("error")) {
        out.error = chunk["error"].value("message", "error event");
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        const auto& u = chunk["usage"];
        out.prompt_tokens = u.value("prompt_tokens", 0);
        if (u.contains("hiq_cached_tokens_by_tier")) {
          out.cached_device = u["hiq_cached_tokens_by_tier"].value("device", 0);
          out.cached_host = u["hiq_cached_tokens_by_tier"].value("host", 0);
          out.cached_storage = u["hiq_cached_tokens_by_tier"].value("storage", 0);
        }
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const auto& choice = chunk["choices"][0];
      if (!choice.contains("token_ids")) continue;
      for (const auto& id : choice["token_ids"]) {
        const auto now = Clock::now();
        if (first) out.ttft = std::chrono::duration<double>(now - start).count();
        else out.gaps.push_back(std::chrono::duration<double>(now - last).count());
        first = false;
        last = now;
        out.output.push_back(id.get<TokenId>());
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  out.e2e = since(start);
  if (!sent) out.error = "no response: " + httplib::to_string(error);
  else if (res.status != 200) out.error = "HTTP " + std::to_string(res.status) + ": " + res.body;
  else if (out.error.empty() && out.output.empty()) out.error = "no tokens in the stream";
  out.ok = out.error.empty();
  return out;
}

}  // namespace

Result<int> server_vocab_size(const LoadOptions& o) {
  httplib::Client client(o.host, o.port);
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  const auto res = client.Get("/v1/models", headers);
  if (!res || res->status != 200)
    return unavailable("cannot read http://" + o.host + ":" + std::to_string(o.port) + "/v1/models");
  const auto models = nlohmann::json::parse(res->body, nullptr, false);
  if (models.is_discarded() || !models.contains("data") || models["data"].empty() ||
      !models["data"][0].contains("vocab_size"))
    return invalid_argument("the server does not report its vocabulary: give --vocab-size");
  return models["data"][0]["vocab_size"].get<int>();
}

Result<LoadReport> run_load(const LoadOptions& o, RequestSource& source,
                            const std::function<void(size_t, size_t)>& progress) {
  if (o.max_concurrency < 1) return invalid_argument("--max-concurrency must be positive");
  if (!(o.request_rate > 0)) return invalid_argument("--request-rate must be positive (inf: no pacing)");
  {
    httplib::Client probe(o.host, o.port);
    probe.set_connection_timeout(5);
    const auto health = probe.Get("/health");
    if (!health || health->status != 200)
      return unavailable("no server answers on http://" + o.host + ":" + std::to_string(o.port) + "/health");
  }
  std::mutex mutex;  // guards the source, the schedule and the results
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(std::isinf(o.request_rate) ? 1.0 : o.request_rate);
  const auto start = Clock::now();
  double next_start = 0;  // seconds after start, for paced runs
  std::vector<Outcome> outcomes;
  const size_t total = source.total();

  const auto client_loop = [&] {
    httplib::Client client(o.host, o.port);
    client.set_read_timeout(static_cast<time_t>(o.timeout_seconds));
    client.set_write_timeout(60);
    std::optional<Request> request;
    Outcome last;
    const Request* finished = nullptr;
    Request previous;
    while (true) {
      double wait_until = 0;
      {
        std::lock_guard lock(mutex);
        request = source.next(finished, last.output);
        if (!request) return;
        if (!std::isinf(o.request_rate)) {
          next_start += gap(rng);
          wait_until = next_start;
        }
      }
      if (wait_until > 0) std::this_thread::sleep_until(start + std::chrono::duration<double>(wait_until));
      last = send(client, o, *request);
      previous = std::move(*request);
      finished = &previous;
      std::lock_guard lock(mutex);
      outcomes.push_back(last);
      if (progress) progress(outcomes.size(), total);
    }
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < o.max_concurrency; ++i) clients.emplace_back(client_loop);
  for (auto& t : clients) t.join();

  LoadReport r;
  r.duration_seconds = since(start);
  std::vector<double> ttft, itl, e2e;
  for (const Outcome& x : outcomes) {
    ++r.requests;
    if (!x.ok) {
      if (r.failed++ == 0) r.first_error = x.error;
      continue;
    }
    r.prompt_tokens += x.prompt_tokens;
    r.completion_tokens += x.output.size();
    r.cached_device_tokens += x.cached_device;
    r.cached_host_tokens += x.cached_host;
    r.cached_storage_tokens += x.cached_storage;
    ttft.push_back(x.ttft);
    e2e.push_back(x.e2e);
    itl.insert(itl.end(), x.gaps.begin(), x.gaps.end());
  }
  if (r.prompt_tokens > 0) {
    const auto p = static_cast<double>(r.prompt_tokens);
    r.hit_rate_device = static_cast<double>(r.cached_device_tokens) / p;
    r.hit_rate_host = static_cast<double>(r.cached_host_tokens) / p;
    r.hit_rate_storage = static_cast<double>(r.cached_storage_tokens) / p;
    r.hit_rate = r.hit_rate_device + r.hit_rate_host + r.hit_rate_storage;
  }
  r.request_throughput = static_cast<double>(r.requests - r.failed) / r.duration_seconds;
  r.output_throughput = static_cast<double>(r.completion_tokens) / r.duration_seconds;
  r.ttft = summarize(std::move(ttft));
  r.itl = summarize(std::move(itl));
  r.e2e = summarize(std::move(e2e));
  return r;
}

}  // namespace hiq
