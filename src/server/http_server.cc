#include "server/http_server.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "server/metrics.h"
#include "server/stop_matcher.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace hiq {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A request ready for the engine — one engine request per choice, all with
// the same prompt — with what the response needs.
struct Job {
  std::vector<Request> choices;
  openai::GenerationParams params;
  std::string model;
  bool chat = false;
  bool token_mode = false;  // return token_ids (token-id prompt, or no tokenizer)
  bool echo = false;        // completions: the prompt comes first in each choice
  std::string echo_text;    // the prompt as text, for echo

  const std::vector<int32_t>& prompt() const { return choices.front().prompt; }
};

void write_error(httplib::Response& res, const openai::ProtocolError& error) {
  res.status = error.http_status;
  // A full queue or a server going away: a client may try again (or elsewhere) soon.
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(openai::error_body(error), "application/json");
}
void write_status(httplib::Response& res, const Status& status) { write_error(res, openai::protocol_error(status)); }

// Whether `fd` is a connected socket with these two ends.
bool has_ends(int fd, const httplib::Request& req) {
  sockaddr_storage peer{}, local{};
  socklen_t peer_size = sizeof(peer), local_size = sizeof(local);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) return false;  // not a connected socket
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) return false;
  const auto address = [](const sockaddr_storage& a, int& port) -> std::string {
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto& in = reinterpret_cast<const sockaddr_in&>(a);
      port = ntohs(in.sin_port);
      return inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text)) ? text : "";
    }
    if (a.ss_family == AF_INET6) {
      const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
      port = ntohs(in6.sin6_port);
      return inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text)) ? text : "";
    }
    return {};
  };
  int peer_port = -1, local_port = -1;
  return address(peer, peer_port) == req.remote_addr && peer_port == req.remote_port &&
         address(local, local_port) == req.local_addr && local_port == req.local_port;
}

// The socket of the connection a request came in on. cpp-httplib 0.11 gives a
// handler its peer's and its own address, not the socket, so the process's
// descriptors are searched for the one with both ends; -1 if none matches.
// While the handler runs, the connection (and so the descriptor) stays open.
// The directory is read with open + getdents64 rather than opendir, whose
// descriptor ThreadSanitizer does not see created (it would take a socket
// closed earlier under the same number for a race).
int connection_socket(const httplib::Request& req) {
  const int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  int found = -1;
  alignas(dirent64) char buffer[8192];
  long size = 0;
  while (found < 0 && (size = syscall(SYS_getdents64, dir, buffer, sizeof(buffer))) > 0) {
    for (long at = 0; at < size && found < 0;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + at);  // the kernel's linux_dirent64 layout
      at += entry->d_reclen;
      int fd = -1;
      const std::string_view name(entry->d_name);
      if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc() || fd == dir) continue;
      if (has_ends(fd, req)) found = fd;
    }
  }
  ::close(dir);
  return found;
}

// Whether the client of `fd` has closed its end (or reset the connection).
// A request's body has been read whole, so a readable end of stream is the
// client going away (a client that only shuts down its sending half reads
// the same; HTTP clients close both).
bool client_closed(int fd) {
  char byte = 0;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// Writes `error` as the response and closes the connection after it. A
// request whose body is left unread must not keep its connection: cpp-httplib
// 0.11 would parse the rest of the body as the next request, and a
// "Connection: close" header does not stop it. A content provider that reports
// failure once it has written the whole body does.
void write_error_and_close(httplib::Response& res, int http_status, std::string message) {
  openai::ProtocolError error;
  error.http_status = http_status;
  error.type = "invalid_request_error";
  error.message = std::move(message);
  res.status = http_status;
  std::string body = openai::error_body(error);
  const size_t size = body.size();
  res.set_content_provider(size, "application/json",
                           [body = std::move(body)](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body.data() + offset, length);
                             return false;  // written: now end the connection
                           });
}

// A POST body, read through `reader` up to `limit` bytes whatever its framing
// (cpp-httplib's own payload limit passes chunked bodies whole). On failure
// the error is the response, the connection closes after it (the body is not
// read to its end), and nullopt is returned.
std::optional<std::string> read_body(const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& reader, size_t limit) {
  const auto refuse = [&](int http_status, std::string message) {
    write_error_and_close(res, http_status, std::move(message));
    return std::nullopt;
  };
  if (req.is_multipart_form_data())
    return refuse(415, "the request body must be JSON (Content-Type: application/json), not multipart/form-data");
  // cpp-httplib 0.11 does not read a DELETE's chunked body at all.
  if (req.method == "DELETE" && !req.has_header("Content-Length") && req.has_header("Transfer-Encoding"))
    return refuse(411, "a DELETE with a body needs a Content-Length");
  std::string body;
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t size) {
    if (size > limit - body.size()) {
      too_large = true;
      return false;
    }
    body.append(data, size);
    return true;
  });
  if (too_large || res.status == 413)
    return refuse(413, "the request body is larger than the limit of " + std::to_string(limit) + " bytes");
  if (!read) return refuse(400, "the request body could not be read");
  return body;
}

openai::FinishReason finish_reason_of(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return openai::FinishReason::kLength;
    case FinishReason::kCancelled: return openai::FinishReason::kAbort;
    default: return openai::FinishReason::kStop;
  }
}

}  // namespace

struct HttpServer::Impl {
  ServingStack& stack;
  HttpOptions options;
  httplib::Server server;
  socket_t listen_socket = INVALID_SOCKET;  // set by the socket options hook as bind() creates it
  std::mutex id_mutex;
  std::mt19937_64 seeds{std::random_device{}()};  // for requests without a seed
  uint64_t next_response = 1;
  const int64_t started_at = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();

  MetricsRegistry registry;
  std::mutex metrics_mutex;  // serializes metrics_text()
  Family<Counter>* http_requests = nullptr;
  Family<Counter>* prompt_tokens = nullptr;
  Family<Counter>* generation_tokens = nullptr;
  Family<Counter>* requests_total = nullptr;
  Family<Counter>* cached_tokens = nullptr;
  Family<Counter>* load_back_tokens = nullptr;
  Family<Counter>* backup_tokens = nullptr;
  Family<Counter>* backup_skipped_tokens = nullptr;
  Family<Counter>* evicted_tokens = nullptr;
  Family<Counter>* host_codec_tokens = nullptr;
  Family<Counter>* demotion_waits = nullptr;
  Family<Counter>* demotions_taken_back = nullptr;
  Family<Counter>* fragmented_allocations = nullptr;
  Family<Counter>* transfer_bytes = nullptr;
  Family<Counter>* transfer_seconds = nullptr;
  Family<Counter>* storage_blocks = nullptr;
  Family<Counter>* storage_bytes = nullptr;
  Family<Counter>* storage_errors = nullptr;
  Family<Counter>* storage_seconds = nullptr;
  Family<Counter>* steps = nullptr;
  Family<Counter>* step_seconds = nullptr;
  Family<Counter>* queue_seconds = nullptr;
  Family<Counter>* admission_waits = nullptr;
  Family<Counter>* retractions = nullptr;
  Family<Counter>* rejected = nullptr;
  Family<Gauge>* running = nullptr;
  Family<Gauge>* queued = nullptr;
  Family<Gauge>* hit_rate = nullptr;
  Family<Gauge>* host_used = nullptr;
  Family<Gauge>* host_total = nullptr;
  Family<Gauge>* device_free = nullptr;
  Family<Gauge>* device_total = nullptr;
  Family<Gauge>* tp_size = nullptr;
  Family<Histogram>* ttft = nullptr;
  Family<Histogram>* itl = nullptr;
  Family<Histogram>* e2e = nullptr;

  Impl(ServingStack& s, HttpOptions o) : stack(s), options(std::move(o)) {
    options.limits.vocab_size = stack.vocab_size();
    options.limits.served_model = stack.model_name();
    create_metrics();
    routes();
  }

  void create_metrics() {
    const std::vector<double> latency = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    const std::vector<double> gaps = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5};
    // Names are fixed and valid: a failure here is a programming error.
    http_requests = *registry.counter("hiq:http_requests_total", "HTTP requests by route and status", {"route", "status"});
    prompt_tokens = *registry.counter("sglang:prompt_tokens_total", "Prompt tokens of finished requests");
    generation_tokens = *registry.counter("sglang:generation_tokens_total", "Generated tokens");
    requests_total = *registry.counter("sglang:num_requests_total", "Finished requests by finish reason", {"reason"});
    cached_tokens = *registry.counter("hiq:cached_prompt_tokens_total",
                                      "Prompt tokens served from the KV cache, by tier (device = L1, host = L2, "
                                      "storage = fetched from L3 for the request)",
                                      {"tier"});
    load_back_tokens = *registry.counter("hiq:load_back_tokens_total", "Tokens restored from L2 into L1");
    backup_tokens = *registry.counter("hiq:backup_tokens_total", "Tokens backed up from L1 to L2");
    backup_skipped_tokens = *registry.counter("hiq:backup_skipped_tokens_total",
                                              "Tokens not backed up to L2: no room even after L2 eviction");
    evicted_tokens = *registry.counter("hiq:evicted_tokens_total", "Tokens evicted, by tier", {"tier"});
    host_codec_tokens = *registry.counter("hiq:host_codec_tokens_total",
                                          "A tiered L2: tokens backed up at, demoted to, and restored from each "
                                          "rung's codec, by op (backup, demoted, load_back)",
                                          {"op", "codec"});
    demotion_waits = *registry.counter("hiq:demotion_waits_total",
                                       "A tiered L2: allocations that waited for a demotion to make room");
    demotions_taken_back = *registry.counter(
        "hiq:demotions_taken_back_total",
        "A tiered L2: demotions taken back before they started, because their node was restored or dropped");
    fragmented_allocations = *registry.counter(
        "hiq:l2_fragmented_allocations_total",
        "A tiered L2: allocations whose tokens the free bytes would have held but whose runs were too short "
        "for one (room was then made by demoting or dropping)");
    transfer_bytes = *registry.counter("hiq:transfer_bytes_total",
                                       "Encoded bytes moved between L1 and L2, by direction (load_back, backup)",
                                       {"direction"});
    transfer_seconds = *registry.counter("hiq:transfer_seconds_total",
                                         "Seconds from submission to completion of L1↔L2 transfers, summed, by direction",
                                         {"direction"});
    storage_blocks = *registry.counter("hiq:storage_blocks_total",
                                       "Blocks of KV written to storage (L3) and fetched from it, by op (written, "
                                       "written_at_eviction: write_back's share of written, skipped_at_eviction, "
                                       "already_stored: of written, found stored by another server and not sent, "
                                       "fetched)",
                                       {"op"});
    storage_bytes = *registry.counter("hiq:storage_bytes_total", "Bytes written to and read from storage (L3)",
                                      {"direction"});
    storage_errors = *registry.counter("hiq:storage_errors_total",
                                       "Storage (L3) failures, by kind (write, probe, fetch, corrupt: a value that "
                                       "failed its checks and was not served)",
                                       {"kind"});
    storage_seconds = *registry.counter("hiq:storage_seconds_total",
                                        "Seconds the storage (L3) backend spent, summed over its workers, by op "
                                        "(exists, get, set)",
                                        {"op"});
    steps = *registry.counter("hiq:scheduler_steps_total", "Engine steps, by kind (prefill, decode)", {"kind"});
    step_seconds = *registry.counter("hiq:scheduler_step_seconds_total", "Seconds spent in forward passes, by kind",
                                     {"kind"});
    queue_seconds = *registry.counter("hiq:queue_seconds_total",
                                      "Seconds requests waited from arrival to admission, summed");
    admission_waits = *registry.counter("hiq:admission_waits_total",
                                        "Steps whose next request had to wait for L1 room");
    retractions = *registry.counter("hiq:retracted_requests_total",
                                    "Running requests sent back to the queue when decode ran out of L1");
    rejected = *registry.counter("hiq:rejected_requests_total",
                                 "Requests refused before they were queued, by reason (queue_full)", {"reason"});
    running = *registry.gauge("sglang:num_running_reqs", "Requests running");
    queued = *registry.gauge("sglang:num_queue_reqs", "Requests waiting");
    hit_rate = *registry.gauge("sglang:cache_hit_rate", "Matched prompt tokens / looked-up prompt tokens");
    host_used = *registry.gauge("hiq:host_used_tokens", "Tokens held in the host tier (L2)");
    host_total = *registry.gauge("hiq:host_capacity_tokens", "Tokens the host tier (L2) can hold at its codec");
    device_free = *registry.gauge("hiq:device_free_slots", "Free L1 slots");
    device_total = *registry.gauge("hiq:device_slots", "L1 slots");
    tp_size = *registry.gauge("hiq:tp_size", "Tensor-parallel ranks the model runs on");
    ttft = *registry.histogram("sglang:time_to_first_token_seconds", "Time to first token", latency);
    itl = *registry.histogram("sglang:inter_token_latency_seconds", "Time between generated tokens", gaps);
    e2e = *registry.histogram("sglang:e2e_request_latency_seconds", "Request latency", latency);
  }

  // Counters from the engine's cumulative stats: add what is new.
  static void sync(Counter& c, double total) {
    if (total > c.value()) c.inc(total - c.value());
  }

  std::string metrics_text() {
    // One scrape at a time: sync() reads a counter and adds the difference.
    std::lock_guard lock(metrics_mutex);
    const ServingStats s = stack.engine().stats();
    sync(cached_tokens->with({"device"}), static_cast<double>(s.cached_l1_tokens));
    sync(cached_tokens->with({"host"}), static_cast<double>(s.cached_l2_tokens - s.cached_storage_tokens));
    sync(cached_tokens->with({"storage"}), static_cast<double>(s.cached_storage_tokens));
    const StorageTierStats& st = s.storage_tier;
    sync(storage_blocks->with({"written"}), static_cast<double>(st.written_blocks));
    sync(storage_blocks->with({"written_at_eviction"}), static_cast<double>(st.write_back_blocks));
    sync(storage_blocks->with({"skipped_at_eviction"}), static_cast<double>(st.write_back_skipped_blocks));
    sync(storage_blocks->with({"already_stored"}), static_cast<double>(st.io.set_skipped_blocks));
    sync(storage_blocks->with({"fetched"}), static_cast<double>(st.fetched_blocks));
    sync(storage_bytes->with({"write"}), static_cast<double>(st.io.bytes_written));
    sync(storage_bytes->with({"read"}), static_cast<double>(st.io.bytes_read));
    sync(storage_errors->with({"write"}), static_cast<double>(st.write_failures));
    sync(storage_errors->with({"probe"}), static_cast<double>(st.probe_failures));
    sync(storage_errors->with({"fetch"}), static_cast<double>(st.fetch_failures));
    sync(storage_errors->with({"corrupt"}), static_cast<double>(st.io.corrupt_values));
    sync(storage_seconds->with({"exists"}), st.io.exists_seconds);
    sync(storage_seconds->with({"get"}), st.io.get_seconds);
    sync(storage_seconds->with({"set"}), st.io.set_seconds);
    sync(load_back_tokens->get(), static_cast<double>(s.cache.load_back_tokens));
    sync(backup_tokens->get(), static_cast<double>(s.cache.backup_tokens));
    sync(backup_skipped_tokens->get(), static_cast<double>(s.cache.backup_skipped_tokens));
    sync(evicted_tokens->with({"device"}),
         static_cast<double>(s.cache.l1_evicted_to_host_tokens + s.cache.l1_dropped_tokens));
    sync(evicted_tokens->with({"host"}), static_cast<double>(s.cache.l2_evicted_tokens));
    if (const HostKvPool* l2 = stack.host_pool(); l2 != nullptr && l2->tiered()) {
      for (int r = 0; r < l2->rungs(); ++r) {
        const std::string codec = l2->codec(r).name();
        sync(host_codec_tokens->with({"backup", codec}), static_cast<double>(s.cache.backup_rung_tokens[r]));
        sync(host_codec_tokens->with({"load_back", codec}), static_cast<double>(s.cache.load_back_rung_tokens[r]));
        if (r > 0) sync(host_codec_tokens->with({"demoted", codec}), static_cast<double>(s.cache.demoted_tokens[r]));
      }
      sync(demotion_waits->get(), static_cast<double>(s.cache.demotion_waits));
      sync(demotions_taken_back->get(), static_cast<double>(s.cache.demotions_taken_back));
      sync(fragmented_allocations->get(), static_cast<double>(s.cache.fragmented_allocations));
    }
    sync(transfer_bytes->with({"load_back"}), static_cast<double>(s.transfer.load_bytes));
    sync(transfer_bytes->with({"backup"}), static_cast<double>(s.transfer.backup_bytes));
    sync(transfer_seconds->with({"load_back"}), s.transfer.load_seconds);
    sync(transfer_seconds->with({"backup"}), s.transfer.backup_seconds);
    sync(steps->with({"prefill"}), static_cast<double>(s.scheduler.prefill_steps));
    sync(steps->with({"decode"}), static_cast<double>(s.scheduler.decode_steps));
    sync(step_seconds->with({"prefill"}), s.scheduler.prefill_seconds);
    sync(step_seconds->with({"decode"}), s.scheduler.decode_seconds);
    sync(queue_seconds->get(), s.scheduler.queue_seconds);
    sync(admission_waits->get(), static_cast<double>(s.scheduler.admission_waits));
    sync(retractions->get(), static_cast<double>(s.scheduler.retractions));
    sync(rejected->with({"queue_full"}), static_cast<double>(s.rejected_queue_full));
    running->get().set(static_cast<double>(s.running));
    queued->get().set(static_cast<double>(s.waiting));
    hit_rate->get().set(s.cache.match_tokens > 0 ? static_cast<double>(s.cache.hit_tokens_l1 + s.cache.hit_tokens_l2) /
                                                       static_cast<double>(s.cache.match_tokens)
                                                 : 0.0);
    host_used->get().set(static_cast<double>(s.l2_used_tokens));
    host_total->get().set(static_cast<double>(stack.host_capacity_tokens()));
    device_free->get().set(static_cast<double>(s.l1_free_slots));
    device_total->get().set(static_cast<double>(stack.l1_slots()));
    tp_size->get().set(static_cast<double>(stack.tp_size()));
    return registry.render();
  }

  // The served model as /v1/models describes it.
  nlohmann::json model_object() const {
    return {{"id", stack.model_name()},          {"object", "model"},
            {"created", started_at},             {"owned_by", "hiq"},
            {"root", stack.model_name()},        {"max_model_len", stack.context_tokens()},
            {"vocab_size", stack.vocab_size()}};
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty()) return true;
    // "Bearer <key>", the scheme's name in any case (RFC 7235).
    const std::string header = req.get_header_value("Authorization");
    constexpr std::string_view kScheme = "bearer ";
    const bool bearer = header.size() > kScheme.size() &&
                        std::equal(kScheme.begin(), kScheme.end(), header.begin(), [](char a, char b) {
                          return a == std::tolower(static_cast<unsigned char>(b));
                        });
    if (bearer && std::string_view(header).substr(kScheme.size()) == options.api_key) return true;
    openai::ProtocolError e;
    e.http_status = 401;
    e.type = "invalid_request_error";
    e.code = "invalid_api_key";
    e.message = "a valid API key is needed: Authorization: Bearer <key>";
    write_error(res, e);
    return false;
  }

  std::string response_id(bool chat) {
    std::lock_guard lock(id_mutex);
    return std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_response++);
  }

  // The text of a chat request through the model's template.
  Result<std::string> render_chat(const openai::ChatRequest& r) const {
    const ChatTemplate* chat_template = stack.model().chat_template();
    if (stack.tokenizer() == nullptr)
      return invalid_argument("parameter 'messages': this model has no tokenizer.json, so it takes token ids on "
                              "/v1/completions only");
    if (chat_template == nullptr)
      return invalid_argument("parameter 'messages': this model has no chat template (no chat_template in "
                              "tokenizer_config.json, no chat_template.jinja); start the server with "
                              "--chat-template FILE");
    Result<std::string> text = chat_template->render(r.messages, r.add_generation_prompt, r.chat_template_kwargs);
    if (!text.is_ok() && text.status().code() == StatusCode::kInvalidArgument)
      return invalid_argument("parameter 'messages': the chat template refused them: " + text.status().message());
    return text;
  }

  // The ids of a text prompt, with what the tokenizer adds before it.
  Result<std::vector<int32_t>> encode_prompt(std::string_view text, bool add_special_tokens) const {
    HIQ_ASSIGN_OR_RETURN(std::vector<int32_t> ids, stack.tokenizer()->encode(text, /*parse_special=*/true));
    if (add_special_tokens) {
      const std::vector<int32_t>& prefix = stack.model().prompt_prefix();
      ids.insert(ids.begin(), prefix.begin(), prefix.end());
    }
    return ids;
  }

  // The engine requests of a parsed body, or the error to send.
  Result<Job> prepare(const std::string& body, bool chat) {
    Job job;
    job.chat = chat;
    const Tokenizer* tokenizer = stack.tokenizer();
    Request request;
    if (chat) {
      HIQ_ASSIGN_OR_RETURN(openai::ChatRequest r, openai::parse_chat_request(body, options.limits));
      job.model = r.model;
      job.params = r.params;
      HIQ_ASSIGN_OR_RETURN(const std::string text, render_chat(r));
      HIQ_ASSIGN_OR_RETURN(request.prompt, tokenizer->encode(text, /*parse_special=*/true));
      if (const auto im_end = tokenizer->token_id("<|im_end|>"); im_end && !job.params.ignore_eos)
        request.stop_token_ids.push_back(*im_end);
    } else {
      HIQ_ASSIGN_OR_RETURN(openai::CompletionRequest r, openai::parse_completion_request(body, options.limits));
      job.model = r.model;
      job.params = r.params;
      job.echo = r.echo;
      if (r.prompt_is_tokens()) {
        request.prompt = r.prompt_token_ids;
        job.token_mode = true;
        if (r.echo && tokenizer != nullptr) job.echo_text = tokenizer->decode(request.prompt, /*skip_special=*/false);
      } else {
        if (tokenizer == nullptr)
          return invalid_argument("parameter 'prompt': this model has no tokenizer.json; send token ids");
        HIQ_ASSIGN_OR_RETURN(request.prompt, encode_prompt(r.prompt_text, r.add_special_tokens));
        job.echo_text = r.prompt_text;
      }
      request.prompt_logprobs = r.echo && r.params.logprobs >= 0;
    }
    if (tokenizer == nullptr) job.token_mode = true;
    const std::string prompt_param = chat ? "parameter 'messages': " : "parameter 'prompt': ";
    if (request.prompt.empty()) return invalid_argument(prompt_param + "the prompt has no tokens");
    const size_t context = stack.context_tokens();
    if (request.prompt.size() >= context)
      return invalid_argument(prompt_param + std::to_string(request.prompt.size()) + " tokens " +
                              std::string(openai::kContextLengthExceeded) + " " + std::to_string(context));
    if (static_cast<int>(request.prompt.size()) > options.limits.max_prompt_tokens)
      return out_of_range(prompt_param + std::to_string(request.prompt.size()) +
                          " tokens, more than the limit of " + std::to_string(options.limits.max_prompt_tokens));
    request.max_new_tokens =
        static_cast<int>(std::min<size_t>(static_cast<size_t>(job.params.max_tokens), context - request.prompt.size()));
    // What the request leaves out comes from generation_config.json, then OpenAI's defaults.
    const GenerationConfig& defaults = stack.model().generation_config();
    request.sampling.temperature = static_cast<float>(job.params.temperature.value_or(defaults.temperature.value_or(1.0)));
    request.sampling.top_p = static_cast<float>(job.params.top_p.value_or(defaults.top_p.value_or(1.0)));
    request.sampling.top_k = job.params.top_k.value_or(defaults.top_k.value_or(-1));
    request.logprobs = job.params.logprobs;
    for (int32_t id : job.params.stop_token_ids) request.stop_token_ids.push_back(id);
    if (!job.params.ignore_eos)
      for (int32_t id : stack.eos_token_ids()) request.stop_token_ids.push_back(id);
    uint64_t seed = 0;
    {
      std::lock_guard lock(id_mutex);
      seed = job.params.seed ? *job.params.seed : seeds();
    }
    // Each choice draws from its own stream: the same seed gives the same n choices.
    for (int i = 0; i < job.params.n; ++i) {
      job.choices.push_back(request);
      job.choices.back().sampling.seed = seed + static_cast<uint64_t>(i);
    }
    return job;
  }

  // What one choice's reader keeps: text so far (past stop strings), ids,
  // log-probabilities, timing.
  struct Reader {
    const Tokenizer* tokenizer;
    std::optional<StreamDecoder> decoder;
    StopMatcher stops;
    ReasoningSplitter reasoning;  // chat with --reasoning-parser; kNone passes everything as content
    std::vector<int32_t> ids;
    std::vector<openai::LogprobEntry> logprobs;  // of the generated tokens, when asked
    std::vector<openai::LogprobEntry> prompt_logprobs;  // with echo and logprobs
    size_t logprob_offset = 0;  // completions stream: text_offset of the next log-probability entry
    bool stopped_by_string = false;
    bool finished = false;
    RequestResult result;
    Clock::time_point start = Clock::now(), last_token;
    bool first = true;

    Reader(const Tokenizer* t, std::vector<std::string> stop_strings, ReasoningFormat format)
        : tokenizer(t), stops(std::move(stop_strings)), reasoning(format) {
      if (t != nullptr) decoder.emplace(*t, /*skip_special=*/true);
    }
    // The text a new token releases (empty in token-id mode).
    std::string token(int32_t id) {
      if (stopped_by_string) return {};
      ids.push_back(id);
      if (!decoder) return {};
      const StopMatcher::Step step = stops.feed(decoder->feed(id));
      stopped_by_string = step.stopped;
      return step.text;
    }
    // The text held back at the end.
    std::string finish() {
      if (!decoder || stopped_by_string) return {};
      const StopMatcher::Step step = stops.feed(decoder->flush());
      return step.text + (step.stopped ? std::string() : stops.finish());
    }
    // How a token shows in log-probabilities: its bytes, or "token_id:N"
    // (vLLM's form) without a tokenizer.
    std::string token_text(int32_t id) const {
      if (tokenizer == nullptr) return "token_id:" + std::to_string(id);
      return std::string(tokenizer->token_bytes(id));
    }
    openai::LogprobEntry entry(const TokenLogprobs& l) const {
      openai::LogprobEntry e;
      e.chosen = {token_text(l.token), l.logprob};
      for (const auto& [id, logprob] : l.top) e.top.push_back({token_text(id), logprob});
      return e;
    }
    // The prompt's entries: its first token has no log-probability.
    void set_prompt_logprobs(const std::vector<int32_t>& prompt, const std::vector<TokenLogprobs>& given) {
      openai::LogprobEntry opening;
      opening.chosen = {token_text(prompt.front()), 0};
      opening.has_logprob = false;
      prompt_logprobs.push_back(std::move(opening));
      for (const TokenLogprobs& l : given) prompt_logprobs.push_back(entry(l));
    }
    openai::FinishReason finish_reason() const {
      return stopped_by_string ? openai::FinishReason::kStop : finish_reason_of(result.finish_reason);
    }
  };

  std::vector<Reader> readers_for(const Job& job) const {
    std::vector<Reader> readers;
    const ReasoningFormat format = job.chat ? options.reasoning : ReasoningFormat::kNone;
    for (size_t i = 0; i < job.choices.size(); ++i) readers.emplace_back(stack.tokenizer(), job.params.stop, format);
    return readers;
  }

  void observe_token(Reader& reader) {
    const auto now = Clock::now();
    if (reader.first) ttft->get().observe(std::chrono::duration<double>(now - reader.start).count());
    else itl->get().observe(std::chrono::duration<double>(now - reader.last_token).count());
    reader.first = false;
    reader.last_token = now;
  }

  void observe_finish(const Reader& reader) {
    const RequestResult& result = reader.result;
    e2e->get().observe(seconds_since(reader.start));
    prompt_tokens->get().inc(static_cast<double>(result.prompt_tokens));
    const char* reason = result.finish_reason == FinishReason::kError       ? "error"
                         : result.finish_reason == FinishReason::kCancelled ? (reader.stopped_by_string ? "stop" : "abort")
                         : result.finish_reason == FinishReason::kLength    ? "length"
                                                                            : "stop";
    requests_total->with({reason}).inc();
  }

  // Usage of all choices: the prompt counted once (as OpenAI does), the
  // completions summed, the cached tokens of the first choice (the others
  // find the same prefix, and more of it once the first has run).
  static openai::Usage usage_of(const std::vector<Reader>& readers) {
    openai::Usage u;
    const RequestResult& first = readers.front().result;
    u.prompt_tokens = static_cast<int64_t>(first.prompt_tokens);
    u.cached_tokens_device = static_cast<int64_t>(first.cached_l1_tokens);
    u.cached_tokens_host = static_cast<int64_t>(first.cached_l2_tokens - first.cached_storage_tokens);
    u.cached_tokens_storage = static_cast<int64_t>(first.cached_storage_tokens);
    for (const Reader& r : readers) u.completion_tokens += static_cast<int64_t>(r.ids.size());
    return u;
  }

  // POST /flush_cache (SGLang's): empties L1 and L2 once nothing runs; its body is ignored.
  void flush(const httplib::Request& req, httplib::Response& res, const std::string&) {
    if (!authorized(req, res)) return;
    const Status flushed = stack.engine().flush_cache();
    if (!flushed.is_ok()) return write_status(res, flushed);
    res.set_content("{\"status\":\"flushed\"}", "application/json");
  }

  void completions(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    generate(req, res, body, /*chat=*/false);
  }
  void chat_completions(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    generate(req, res, body, /*chat=*/true);
  }

  // The first error among the choices, if one failed.
  static std::optional<Status> failure(const std::vector<Reader>& readers) {
    for (const Reader& r : readers)
      if (r.result.finish_reason == FinishReason::kError) return r.result.status;
    return std::nullopt;
  }

  void generate(const httplib::Request& req, httplib::Response& res, const std::string& body, bool chat) {
    if (!authorized(req, res)) return;
    auto job = prepare(body, chat);
    if (!job) return write_status(res, job.status());
    auto submitted = stack.engine().submit(job->choices);
    if (!submitted) return write_status(res, submitted.status());
    std::shared_ptr<GenerationStream> stream = *submitted;
    openai::ResponseMeta meta;
    meta.id = response_id(chat);
    meta.model = job->model;
    meta.created = static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
    if (job->params.stream) return stream_response(res, std::move(*job), stream, meta);

    std::vector<Reader> readers = readers_for(*job);
    std::vector<std::string> texts(readers.size());
    size_t open = readers.size();
    // A client that goes away cancels its request, as a streaming one does:
    // a client that timed out (and perhaps retried) must not leave it running.
    // Its socket is searched for only once the request has run a quarter
    // second: most requests end before, and pay nothing for the search.
    std::optional<int> socket;
    bool cancelled = false;
    Clock::time_point looked = Clock::now();
    while (open > 0) {
      auto event = stream->next(1s);
      if (!cancelled && Clock::now() - looked >= 250ms) {  // a look at the client now and then
        looked = Clock::now();
        if (!socket) socket = connection_socket(req);
        if (*socket >= 0 && client_closed(*socket)) {
          stack.engine().cancel(*stream);
          cancelled = true;
        }
      }
      if (!event) continue;  // a long generation: keep waiting (the engine finishes a cancelled one promptly)
      Reader& reader = readers[event->choice];
      if (event->kind == GenerationEvent::Kind::kFinished) {
        reader.result = std::move(event->result);
        reader.finished = true;
        --open;
        continue;
      }
      observe_token(reader);
      if (!event->prompt_logprobs.empty()) reader.set_prompt_logprobs(job->prompt(), event->prompt_logprobs);
      const bool was_stopped = reader.stopped_by_string;
      if (event->logprobs && !was_stopped) reader.logprobs.push_back(reader.entry(*event->logprobs));
      texts[event->choice] += reader.token(event->token);
      if (!was_stopped) generation_tokens->get().inc();  // as it comes, so the rate shows while requests run
      if (reader.stopped_by_string && !was_stopped) stack.engine().cancel(stream->ids()[event->choice]);
    }
    for (size_t i = 0; i < readers.size(); ++i) {
      texts[i] += readers[i].finish();
      observe_finish(readers[i]);
    }
    if (const auto error = failure(readers)) return write_status(res, *error);
    std::vector<openai::Choice> choices(readers.size());
    for (size_t i = 0; i < readers.size(); ++i) {
      Reader& reader = readers[i];
      openai::Choice& choice = choices[i];
      choice.index = i;
      ReasoningSplitter::Piece split = reader.reasoning.feed(texts[i]);
      ReasoningSplitter::Piece rest = reader.reasoning.finish();
      texts[i] = std::move(split.content) + rest.content;
      choice.reasoning_content = std::move(split.reasoning) + rest.reasoning;
      choice.text = job->echo ? job->echo_text + texts[i] : std::move(texts[i]);
      choice.finish_reason = reader.finish_reason();
      if (job->token_mode) choice.token_ids = reader.ids;
      if (job->params.logprobs >= 0) {
        std::vector<openai::LogprobEntry> entries = std::move(reader.prompt_logprobs);
        entries.insert(entries.end(), reader.logprobs.begin(), reader.logprobs.end());
        choice.logprobs = std::move(entries);
      }
    }
    const openai::Usage usage = usage_of(readers);
    res.set_content(chat ? openai::chat_response(meta, choices, usage) : openai::completion_response(meta, choices, usage),
                    "application/json");
  }

  void stream_response(httplib::Response& res, Job job, std::shared_ptr<GenerationStream> stream,
                       openai::ResponseMeta meta) {
    auto shared_job = std::make_shared<Job>(std::move(job));
    res.set_chunked_content_provider("text/event-stream", [this, shared_job, stream, meta](size_t,
                                                                                          httplib::DataSink& sink) {
      const Job& j = *shared_job;
      openai::StreamContext ctx;
      ctx.meta = meta;
      ctx.include_usage = j.params.include_usage;
      std::vector<Reader> readers = readers_for(j);
      bool client_gone = false;
      const auto send = [&](const std::string& event) {
        if (!client_gone && !sink.write(event.data(), event.size())) client_gone = true;
        return !client_gone;
      };
      const auto cancel_if_gone = [&] {
        if (client_gone) stack.engine().cancel(*stream);
      };
      // A choice that ends sends its held-back text and finish chunk at once,
      // not after the other choices have ended.
      const auto finish_choice = [&](size_t i) {
        Reader& reader = readers[i];
        const std::string tail = reader.finish();
        if (j.chat) {
          ReasoningSplitter::Piece piece = reader.reasoning.feed(tail);
          const ReasoningSplitter::Piece rest = reader.reasoning.finish();
          piece.reasoning += rest.reasoning;
          piece.content += rest.content;
          if (!piece.reasoning.empty()) send(openai::chat_reasoning_chunk(ctx, piece.reasoning, i));
          if (!piece.content.empty()) send(openai::chat_content_chunk(ctx, piece.content, nullptr, {i, nullptr}));
          send(openai::chat_finish_chunk(ctx, reader.finish_reason(), i));
        } else {
          send(openai::completion_chunk(ctx, tail, reader.finish_reason(), nullptr, {i, nullptr}));
        }
      };
      if (j.chat)
        for (size_t i = 0; i < readers.size(); ++i) send(openai::chat_role_chunk(ctx, i));
      size_t open = readers.size();
      int unwritable_checks = 0;
      while (open > 0) {
        auto event = stream->next(100ms);
        if (!event) {
          // A client that went away stays away, while one failed readiness
          // check may be transient (an interrupted poll): two in a row decide.
          if (sink.is_writable()) unwritable_checks = 0;
          else if (++unwritable_checks >= 2) client_gone = true;
          cancel_if_gone();
          continue;  // the engine finishes a cancelled request promptly
        }
        const size_t index = event->choice;
        Reader& reader = readers[index];
        if (event->kind == GenerationEvent::Kind::kFinished) {
          reader.result = std::move(event->result);
          reader.finished = true;
          --open;
          // A failed choice fails the whole response (an error event, below).
          if (reader.result.finish_reason != FinishReason::kError && !failure(readers)) finish_choice(index);
          continue;
        }
        const bool first = reader.first;
        observe_token(reader);
        if (first && j.echo) {  // the prompt, before the first generated text
          if (!event->prompt_logprobs.empty()) reader.set_prompt_logprobs(j.prompt(), event->prompt_logprobs);
          const bool with_logprobs = j.params.logprobs >= 0;
          send(openai::completion_chunk(ctx, j.echo_text, std::nullopt, nullptr,
                                        {index, with_logprobs ? &reader.prompt_logprobs : nullptr, 0}));
          if (with_logprobs) reader.logprob_offset = openai::logprob_text_characters(reader.prompt_logprobs);
        }
        const bool was_stopped = reader.stopped_by_string;
        const std::string text = reader.token(event->token);
        if (!was_stopped) generation_tokens->get().inc();
        std::vector<openai::LogprobEntry> logprobs;
        if (event->logprobs && !was_stopped) logprobs.push_back(reader.entry(*event->logprobs));
        const std::vector<int32_t> one = {event->token};
        const std::vector<int32_t>* ids = j.token_mode && !was_stopped ? &one : nullptr;
        const openai::ChunkExtras extras{index, event->logprobs && !was_stopped ? &logprobs : nullptr,
                                         reader.logprob_offset};
        if (extras.logprobs != nullptr) reader.logprob_offset += openai::logprob_text_characters(logprobs);
        if (j.chat) {
          const ReasoningSplitter::Piece piece = reader.reasoning.feed(text);
          if (!piece.reasoning.empty()) send(openai::chat_reasoning_chunk(ctx, piece.reasoning, index));
          if (!piece.content.empty() || ids != nullptr || extras.logprobs != nullptr)
            send(openai::chat_content_chunk(ctx, piece.content, ids, extras));
        } else if (!text.empty() || ids != nullptr || extras.logprobs != nullptr) {
          send(openai::completion_chunk(ctx, text, std::nullopt, ids, extras));
        }
        if (reader.stopped_by_string && !was_stopped) stack.engine().cancel(stream->ids()[index]);
        cancel_if_gone();
      }
      for (const Reader& reader : readers) observe_finish(reader);
      if (client_gone) return false;
      if (const auto error = failure(readers)) send(openai::error_event(openai::protocol_error(*error)));
      else if (ctx.include_usage) send(openai::usage_chunk(ctx, j.chat, usage_of(readers)));
      send(openai::done_event());
      sink.done();
      return true;
    });
  }

  // POST /tokenize: a text (with what the tokenizer adds before it) or a
  // conversation through the chat template.
  void tokenize(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    if (!authorized(req, res)) return;
    auto r = openai::parse_tokenize_request(body, options.limits);
    if (!r) return write_status(res, r.status());
    if (stack.tokenizer() == nullptr)
      return write_status(res, invalid_argument("this model has no tokenizer.json: it takes and gives token ids only"));
    Result<std::vector<int32_t>> ids = std::vector<int32_t>();
    if (r->prompt) {
      ids = encode_prompt(*r->prompt, r->add_special_tokens);
    } else {
      auto text = render_chat(*r->chat);
      if (!text) return write_status(res, text.status());
      ids = stack.tokenizer()->encode(*text, /*parse_special=*/true);
    }
    if (!ids) return write_status(res, ids.status());
    std::vector<std::string> strs;
    if (r->return_token_strs)
      for (int32_t id : *ids) strs.push_back(stack.tokenizer()->id_to_token(id).value_or(""));
    res.set_content(openai::tokenize_response(*ids, stack.context_tokens(), r->return_token_strs ? &strs : nullptr),
                    "application/json");
  }

  // POST /detokenize: token ids back to text (special tokens kept, as vLLM's).
  void detokenize(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    if (!authorized(req, res)) return;
    auto r = openai::parse_detokenize_request(body, options.limits);
    if (!r) return write_status(res, r.status());
    if (stack.tokenizer() == nullptr)
      return write_status(res, invalid_argument("this model has no tokenizer.json: it takes and gives token ids only"));
    res.set_content(openai::detokenize_response(stack.tokenizer()->decode(r->tokens, /*skip_special=*/false)),
                    "application/json");
  }

  void routes() {
    // The listening socket, in place of cpp-httplib's defaults: SO_REUSEADDR
    // (a restarted server binds through TIME_WAIT) but not SO_REUSEPORT, so a
    // second server on a port in use fails to bind instead of sharing it; and
    // TCP_NODELAY, which accepted sockets inherit, so each streamed token
    // leaves at once. The socket is kept to raise its backlog after bind().
    server.set_socket_options([this](socket_t sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      listen_socket = sock;
    });
    server.set_payload_max_length(options.limits.max_body_bytes);
    // cpp-httplib reads no body for GET, HEAD or OPTIONS: one sent anyway would
    // be parsed as a next request on the connection. Refused, and closed.
    server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      const bool reads_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                              req.method == "DELETE";
      const bool has_body = req.has_header("Transfer-Encoding") ||
                            (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
      if (reads_body || !has_body) return httplib::Server::HandlerResponse::Unhandled;
      write_error_and_close(res, 400, "a " + req.method + " request has no body");
      return httplib::Server::HandlerResponse::Handled;
    });
    const int threads = options.threads;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
      std::string what = "an unknown exception";
      try {
        if (e) std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      log(LogLevel::kError, "http", req.method + " " + req.path + " threw: " + what);
      write_status(res, internal_error("the server failed on this request"));
    });
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.has_header("Content-Type")) return;  // ours, whole or provided
      openai::ProtocolError e;
      e.http_status = res.status;
      e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
      e.message = res.status == 404   ? "no route " + req.method + " " + req.path
                  : res.status == 413 ? "the request body is too large"
                                      : "HTTP " + std::to_string(res.status);
      res.set_content(openai::error_body(e), "application/json");
    });
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      // Only known routes become label values: a scan of random paths must not grow the registry.
      static const std::set<std::string> kRoutes = {"/health", "/metrics", "/v1/models", "/v1/completions",
                                                    "/v1/chat/completions", "/flush_cache", "/tokenize",
                                                    "/detokenize"};
      http_requests->with({kRoutes.count(req.path) ? req.path : "other", std::to_string(res.status)}).inc();
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const nlohmann::json body = {{"object", "list"}, {"data", {model_object()}}};
      res.set_content(body.dump(), "application/json");
    });
    // One model by its id (OpenAI's models.retrieve): the served one, or a 404.
    server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      if (req.matches[1] != stack.model_name()) {
        write_status(res, not_found("parameter 'model': '" + std::string(req.matches[1]) +
                                    "' is not served here; this server has '" + stack.model_name() + "'"));
        return;
      }
      res.set_content(model_object().dump(), "application/json");
    });
    // Bodies are read by the handlers (read_body), so that one limit holds
    // whatever the framing or content type.
    using Handler = void (Impl::*)(const httplib::Request&, httplib::Response&, const std::string&);
    const auto post = [this](const std::string& path, Handler handler) {
      server.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
        if (const auto body = read_body(req, res, reader, options.limits.max_body_bytes)) (this->*handler)(req, res, *body);
      });
    };
    post("/v1/completions", &Impl::completions);
    post("/v1/chat/completions", &Impl::chat_completions);
    post("/tokenize", &Impl::tokenize);
    post("/detokenize", &Impl::detokenize);
    post("/flush_cache", &Impl::flush);
    // Any other path with a body: cpp-httplib would read it whole (chunked,
    // without a limit) before answering 404.
    const httplib::Server::HandlerWithContentReader no_route =
        [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
          if (read_body(req, res, reader, options.limits.max_body_bytes)) res.status = 404;
        };
    server.Post(".*", no_route);
    server.Put(".*", no_route);
    server.Patch(".*", no_route);
    server.Delete(".*", no_route);

  }
};

Status HttpOptions::validate() const {
  if (port < 0 || port > 65535) return invalid_argument("port must be in [0, 65535], got " + std::to_string(port));
  // No thread: connections are accepted and never answered.
  if (threads < 1 || threads > 4096) return invalid_argument("threads must be in [1, 4096], got " + std::to_string(threads));
  if (host.empty()) return invalid_argument("host must not be empty");
  return limits.validate();
}

HttpServer::HttpServer(ServingStack& stack, HttpOptions options)
    : impl_(std::make_unique<Impl>(stack, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(o.host);
    if (port <= 0) return unavailable("cannot bind " + o.host + " to a free port");
  } else if (!impl_->server.bind_to_port(o.host, o.port)) {
    return unavailable("cannot bind " + o.host + ":" + std::to_string(o.port) + " (in use, or not an address here)");
  }
  // cpp-httplib listens with a backlog of 5: more clients than that
  // connecting at once lose their SYNs and wait a second for the retransmit.
  // Listening again on the bound socket sets the backlog.
  if (::listen(impl_->listen_socket, SOMAXCONN) != 0)
    return unavailable("cannot listen on " + o.host + ":" + std::to_string(port) + ": " + std::strerror(errno));
  return port;
}

Status HttpServer::serve() {
  if (!impl_->server.listen_after_bind()) return unavailable("the HTTP server stopped with an error");
  return Status::ok();
}

void HttpServer::stop() {
  if (impl_ && impl_->server.is_running()) impl_->server.stop();
}

std::string HttpServer::metrics_text() { return impl_->metrics_text(); }

}  // namespace hiq
