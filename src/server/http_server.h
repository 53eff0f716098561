// server/http_server.h — `hiq serve`'s HTTP front: the OpenAI-compatible API
// over a ServingStack, on cpp-httplib.
//
// Routes: POST /v1/completions and /v1/chat/completions (whole responses or
// server-sent events), GET /v1/models, GET /health, GET /metrics (Prometheus
// text), POST /flush_cache. A refused request gets a 4xx (or 503) JSON error
// in OpenAI's shape; nothing a request does can stop the server: handler
// exceptions become 500s, a failed batch fails only its requests, a client
// that goes away mid-stream cancels its request. With an API key, every
// route but /health and /metrics wants `Authorization: Bearer <key>`.
//
// Prompts are text (through the model directory's tokenizer) or token ids;
// without a tokenizer the server runs in token-id mode: text prompts get a
// 400 and every choice carries its generated ids (`token_ids`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/openai.h"
#include "server/reasoning_parser.h"
#include "server/serving_stack.h"

namespace hiq {

struct HttpOptions {
  std::string host = "127.0.0.1";  // --host: loopback unless told otherwise
  int port = 30000;                // --port (SGLang's default); 0: any free port
  std::string api_key;             // --api-key; empty: no authentication
  openai::ProtocolLimits limits;   // body size, prompt length, max_tokens
  int threads = 32;                // connections served at once
  ReasoningFormat reasoning = ReasoningFormat::kNone;  // --reasoning-parser: chat's reasoning_content

  // Errors start with the field's name ("threads must be ...").
  Status validate() const;
};

class HttpServer {
 public:
  // `stack` must outlive the server.
  HttpServer(ServingStack& stack, HttpOptions options);
  ~HttpServer();

  // Binds the socket; returns the port (the chosen one for port 0).
  // Errors: the address cannot be bound (kUnavailable).
  Result<int> bind();
  // Serves until stop(); call after bind().
  Status serve();
  // Stops accepting; requests in flight finish. Safe from any thread.
  void stop();
  // The Prometheus text of /metrics.
  std::string metrics_text();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hiq
