#include "storage/redis_backend.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <string_view>
#include <vector>

namespace hiq {

Status RedisBackendOptions::validate() const {
  auto positive = [](int value, const char* field) -> Status {
    if (value > 0) return Status::ok();
    return invalid_argument(std::string("redis storage: ") + field + " must be positive (got " +
                            std::to_string(value) + ")");
  };
  if (host.empty()) return invalid_argument("redis storage: host is empty");
  if (port < 1 || port > 65535)
    return invalid_argument("redis storage: port " + std::to_string(port) + " is outside [1, 65535]");
  HIQ_RETURN_IF_ERROR(positive(connect_timeout_ms, "connect_timeout_ms"));
  HIQ_RETURN_IF_ERROR(positive(command_timeout_ms, "command_timeout_ms"));
  HIQ_RETURN_IF_ERROR(positive(reconnect_initial_ms, "reconnect_initial_ms"));
  HIQ_RETURN_IF_ERROR(positive(reconnect_max_ms, "reconnect_max_ms"));
  if (reconnect_max_ms < reconnect_initial_ms)
    return invalid_argument("redis storage: reconnect_max_ms " + std::to_string(reconnect_max_ms) +
                            " is below reconnect_initial_ms " + std::to_string(reconnect_initial_ms));
  HIQ_RETURN_IF_ERROR(positive(connections, "connections"));
  if (ttl_seconds < 0) return invalid_argument("redis storage: ttl_s must be 0 (none) or positive");
  if (pipeline_bytes == 0) return invalid_argument("redis storage: pipeline_bytes must be positive");
  return Status::ok();
}

namespace {

using Clock = std::chrono::steady_clock;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

class RedisBackend final : public StorageBackend {
 public:
  explicit RedisBackend(const RedisBackendOptions& options)
      : options_(options), endpoint_(options.host + ":" + std::to_string(options.port)) {}

  std::string_view name() const override { return "redis"; }

  Result<size_t> exists(std::span<const StorageKey> keys) override {
    size_t held = 0;
    const std::vector<std::string> names = names_of(keys);
    HIQ_RETURN_IF_ERROR(run("EXISTS", [&](redisContext* c) -> Status {
      held = 0;
      for (const std::string& name : names)
        if (redisAppendCommand(c, "EXISTS %b", name.data(), name.size()) != REDIS_OK) return broken(c, "EXISTS");
      bool counting = true;
      Status first_error;
      for (size_t i = 0; i < names.size(); ++i) {
        HIQ_ASSIGN_OR_RETURN(Reply reply, next_reply(c, "EXISTS"));
        if (reply->type == REDIS_REPLY_ERROR) {
          if (first_error.is_ok()) first_error = error_reply("EXISTS", *reply);
          counting = false;
        } else if (counting && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) {
          ++held;
        } else {
          counting = false;
        }
      }
      return first_error;
    }));
    return held;
  }

  Status read(std::span<const StorageKey> keys, const ValueVisitor& visit) override {
    // The replies are visited where hiredis put them, once all have come
    // (a reconnect may run the pipeline again).
    std::vector<Reply> replies;
    const std::vector<std::string> names = names_of(keys);
    HIQ_RETURN_IF_ERROR(run("GET", [&](redisContext* c) -> Status {
      replies.clear();
      for (const std::string& name : names)
        if (redisAppendCommand(c, "GET %b", name.data(), name.size()) != REDIS_OK) return broken(c, "GET");
      Status first_error;
      for (size_t i = 0; i < names.size(); ++i) {
        HIQ_ASSIGN_OR_RETURN(Reply reply, next_reply(c, "GET"));
        if (reply->type == REDIS_REPLY_ERROR && first_error.is_ok()) first_error = error_reply("GET", *reply);
        replies.push_back(std::move(reply));
      }
      return first_error;
    }));
    for (size_t i = 0; i < replies.size(); ++i) {
      const redisReply& reply = *replies[i];
      const std::span<const std::byte> value =
          reply.type == REDIS_REPLY_STRING ? std::span(reinterpret_cast<const std::byte*>(reply.str), reply.len)
                                           : std::span<const std::byte>();
      if (!visit(i, value)) break;
    }
    return Status::ok();
  }

  Status set(std::span<const StorageKey> keys, std::span<const std::vector<std::byte>> values) override {
    if (keys.size() != values.size())
      return invalid_argument("redis storage: " + std::to_string(keys.size()) + " keys but " +
                              std::to_string(values.size()) + " values");
    for (const auto& value : values)
      if (value.empty()) return invalid_argument("redis storage: an empty value");
    const std::vector<std::string> names = names_of(keys);
    return run("SET", [&](redisContext* c) -> Status {
      Status first_error;
      size_t pending = 0, pending_bytes = 0;
      auto drain = [&]() -> Status {
        for (; pending > 0; --pending) {
          HIQ_ASSIGN_OR_RETURN(Reply reply, next_reply(c, "SET"));
          if (reply->type == REDIS_REPLY_ERROR && first_error.is_ok()) first_error = error_reply("SET", *reply);
        }
        pending_bytes = 0;
        return Status::ok();
      };
      for (size_t i = 0; i < names.size(); ++i) {
        const auto* bytes = reinterpret_cast<const char*>(values[i].data());
        const int appended =
            options_.ttl_seconds > 0
                ? redisAppendCommand(c, "SET %b %b EX %d", names[i].data(), names[i].size(), bytes, values[i].size(),
                                     options_.ttl_seconds)
                : redisAppendCommand(c, "SET %b %b", names[i].data(), names[i].size(), bytes, values[i].size());
        if (appended != REDIS_OK) return broken(c, "SET");
        ++pending;
        pending_bytes += values[i].size();
        if (pending_bytes >= options_.pipeline_bytes) HIQ_RETURN_IF_ERROR(drain());
      }
      HIQ_RETURN_IF_ERROR(drain());
      return first_error;
    });
  }

  Status remove(std::span<const StorageKey> keys) override {
    const std::vector<std::string> names = names_of(keys);
    return run("DEL", [&](redisContext* c) -> Status {
      for (const std::string& name : names)
        if (redisAppendCommand(c, "DEL %b", name.data(), name.size()) != REDIS_OK) return broken(c, "DEL");
      Status first_error;
      for (size_t i = 0; i < names.size(); ++i) {
        HIQ_ASSIGN_OR_RETURN(Reply reply, next_reply(c, "DEL"));
        if (reply->type == REDIS_REPLY_ERROR && first_error.is_ok()) first_error = error_reply("DEL", *reply);
      }
      return first_error;
    });
  }

 private:
  struct Lease {
    Context context;
    bool reused = false;  // taken from the pool (it may have died while idle), not connected for this call
  };

  std::vector<std::string> names_of(std::span<const StorageKey> keys) const {
    std::vector<std::string> names;
    names.reserve(keys.size());
    for (const StorageKey& key : keys) names.push_back(options_.key_prefix + key.hex());
    return names;
  }

  Status broken(redisContext* c, std::string_view command) const {
    return unavailable("redis " + endpoint_ + ": " + std::string(command) + ": " +
                       (c->err ? std::string(c->errstr) : std::string("cannot queue the command")));
  }

  Result<Reply> next_reply(redisContext* c, std::string_view command) const {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) return broken(c, command);
    return Reply(static_cast<redisReply*>(raw));
  }

  Status error_reply(std::string_view command, const redisReply& reply) const {
    const std::string text(reply.str ? std::string_view(reply.str, reply.len) : std::string_view());
    std::string message = "redis " + endpoint_ + ": " + std::string(command) + ": " + text.substr(0, 200);
    if (text.starts_with("OOM")) return resource_exhausted(std::move(message));
    return unavailable(std::move(message));
  }

  // Runs `batch` (it appends commands and reads every reply) on a connection
  // of the pool. A connection left in error is dropped, and the backend is
  // marked down unless the connection came from the pool, in which case the
  // batch is tried once more on a fresh one.
  Status run(std::string_view command, const std::function<Status(redisContext*)>& batch) {
    for (int attempt = 0;; ++attempt) {
      HIQ_ASSIGN_OR_RETURN(Lease lease, acquire());
      Status status = batch(lease.context.get());
      if (lease.context->err == 0) {
        give_back(std::move(lease.context));
        return status;
      }
      const std::string why = lease.context->errstr;
      const bool retry = lease.reused && attempt == 0;
      {
        std::lock_guard lock(mutex_);
        idle_.clear();
        if (!retry) note_failure_locked(why);
      }
      if (!retry) return unavailable("redis " + endpoint_ + ": " + std::string(command) + ": " + why);
    }
  }

  Result<Lease> acquire() {
    bool probe = false;
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        Context context = std::move(idle_.back());
        idle_.pop_back();
        return Lease{std::move(context), true};
      }
      if (down_) {
        const auto now = Clock::now();
        if (probing_ || now < retry_at_) {
          const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::max(retry_at_ - now, Clock::duration{}));
          return unavailable("redis " + endpoint_ + " is unreachable (" + last_error_ + "); next attempt in " +
                             std::to_string(wait.count()) + " ms");
        }
        probing_ = probe = true;
      }
    }
    Result<Context> context = connect();
    std::lock_guard lock(mutex_);
    if (probe) probing_ = false;
    if (!context.is_ok()) {
      note_failure_locked(context.status().message());
      return context.status();
    }
    down_ = false;
    backoff_ = Clock::duration{};
    return Lease{std::move(*context), false};
  }

  Result<Context> connect() const {
    Context c(redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(options_.connect_timeout_ms)));
    if (!c) return unavailable("redis " + endpoint_ + ": cannot allocate a connection");
    if (c->err) return unavailable("redis " + endpoint_ + ": connect: " + std::string(c->errstr));
    if (redisSetTimeout(c.get(), to_timeval(options_.command_timeout_ms)) != REDIS_OK)
      return unavailable("redis " + endpoint_ + ": cannot set the command timeout: " + std::string(c->errstr));
    redisEnableKeepAlive(c.get());
    return c;
  }

  void give_back(Context context) {
    std::lock_guard lock(mutex_);
    if (idle_.size() < static_cast<size_t>(options_.connections)) idle_.push_back(std::move(context));
  }

  void note_failure_locked(const std::string& why) {
    const Clock::duration initial = std::chrono::milliseconds(options_.reconnect_initial_ms);
    const Clock::duration most = std::chrono::milliseconds(options_.reconnect_max_ms);
    backoff_ = backoff_ == Clock::duration{} ? initial : std::min(2 * backoff_, most);
    down_ = true;
    retry_at_ = Clock::now() + backoff_;
    last_error_ = why;
    idle_.clear();
  }

  const RedisBackendOptions options_;
  const std::string endpoint_;

  std::mutex mutex_;  // guards everything below
  std::vector<Context> idle_;
  bool down_ = false;       // the last attempt failed: calls fail fast until retry_at_
  bool probing_ = false;    // one call is trying to connect after retry_at_
  Clock::duration backoff_{};
  Clock::time_point retry_at_{};
  std::string last_error_;
};

}  // namespace

Result<std::unique_ptr<StorageBackend>> make_redis_backend(const RedisBackendOptions& options) {
  HIQ_RETURN_IF_ERROR(options.validate());
  return std::unique_ptr<StorageBackend>(new RedisBackend(options));
}

}  // namespace hiq
