#!/usr/bin/env bash
# `hiq serve` run as an operator would, on the committed tiny checkpoint
# (byte-level tokenizer, CPU backend, a BF16 host tier), driven over HTTP by a
# plain Python client: the API's shapes, greedy output equal to `hiq generate`
# with the cache on, from L1 and from a prefix restored from L2, streaming,
# stop strings, concurrent clients, a client that disconnects, bad requests,
# metrics that show the restores, /flush_cache, and a graceful SIGTERM.
#
# Usage: HIQ=/path/to/hiq tests/cli_serve_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
MODEL="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
# Under ThreadSanitizer, leave out the internals of the prebuilt cpp-httplib,
# which TSan cannot judge (tests/tsan.supp); our code stays checked.
if [[ -n "${TSAN_OPTIONS:-}" ]]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_serve_test.XXXXXX")"
PID=""
CHAT_PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
  [[ -n "$CHAT_PID" ]] && kill "$CHAT_PID" 2>/dev/null || true
  rm -rf -- "$TMP"
}
trap cleanup EXIT

# Exit 77: ctest reports Skipped (SKIP_RETURN_CODE), not Passed.
if "$HIQ" serve --help 2>&1 | grep -q "not in this build"; then
  echo "SKIP: this hiq has no HTTP server (cpp-httplib missing at build time)" >&2
  exit 77
fi

# The reference: greedy ids of the same prompts without any server or cache.
PROMPT_IDS="72,101,108,108,111,44,32,119,111,114,108,100,33"
"$HIQ" generate --model "$MODEL" --prompt-ids "$PROMPT_IDS" --max-new-tokens 8 --json >"$TMP/alone.json" 2>/dev/null

"$HIQ" serve --model "$MODEL" --port 0 --max-total-tokens 600 --hicache-codec bf16 --hicache-ratio 4 \
  --api-key secret --max-body-bytes 65536 --threads 16 2>"$TMP/log" &
PID=$!
for _ in $(seq 1 200); do
  grep -q "listening on" "$TMP/log" && break
  kill -0 "$PID" 2>/dev/null || { cat "$TMP/log" >&2; echo "FAIL: hiq serve exited" >&2; exit 1; }
  sleep 0.05
done
PORT="$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$TMP/log")"
[[ -n "$PORT" ]] || { cat "$TMP/log" >&2; echo "FAIL: no port in the log" >&2; exit 1; }
grep -q "(16 connections at once)" "$TMP/log" || { cat "$TMP/log" >&2; echo "FAIL: --threads 16 not applied" >&2; exit 1; }
echo "ok   hiq serve listening on port $PORT"

python3 - "$PORT" "$TMP/alone.json" <<'PY'
import json, socket, sys, threading, urllib.error, urllib.request

PORT, ALONE = int(sys.argv[1]), json.load(open(sys.argv[2]))["output_ids"]
BASE = f"http://127.0.0.1:{PORT}"
KEY = {"Authorization": "Bearer secret"}
checks = 0


def ok(what):
    global checks
    checks += 1
    print("ok  ", what)


def call(method, path, body=None, headers=KEY, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def completion(body):
    status, text = call("POST", "/v1/completions", body)
    assert status == 200, (status, text)
    return json.loads(text)


def error_of(status, text, want_status):
    assert status == want_status, (status, text)
    err = json.loads(text)["error"]
    assert isinstance(err["message"], str) and err["message"] and "type" in err, err
    return err


# Health, models, authentication.
assert call("GET", "/health", headers={})[0] == 200
ok("/health answers without a key")
err = error_of(*call("GET", "/v1/models", headers={}), 401)
assert err["code"] == "invalid_api_key", err
ok("/v1/models without the key: 401 in OpenAI's shape")
models = json.loads(call("GET", "/v1/models")[1])
assert models["data"][0]["id"] == "tiny-qwen3", models
ok("/v1/models lists tiny-qwen3")
one = json.loads(call("GET", "/v1/models/tiny-qwen3")[1])
assert one == models["data"][0], (one, models)
err = error_of(*call("GET", "/v1/models/other-model"), 404)
assert err["code"] == "model_not_found" and err["param"] == "model", err
assert error_of(*call("GET", "/v1/models/tiny-qwen3", headers={}), 401)["code"] == "invalid_api_key"
ok("/v1/models/{id}: the served model, a 404 in OpenAI's shape for another, the key checked")
assert json.loads(call("GET", "/v1/models", headers={"Authorization": "bearer secret"})[1])["object"] == "list"
assert error_of(*call("GET", "/v1/models", headers={"Authorization": "Bearer secre"}), 401)["code"] == "invalid_api_key"
ok("the Bearer scheme's name in any case; a wrong key still 401")

# Greedy token ids equal hiq generate's (no server, no cache), twice: the
# second time the prompt's KV comes from the cache.
ids = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33]
first = completion({"prompt": ids, "max_tokens": 8, "temperature": 0})
assert first["choices"][0]["token_ids"] == ALONE, (first, ALONE)
assert first["choices"][0]["finish_reason"] == "length", first
assert first["usage"]["prompt_tokens"] == len(ids) and first["usage"]["completion_tokens"] == 8, first
ok("token-id prompt: greedy ids equal hiq generate's")
again = completion({"prompt": ids, "max_tokens": 8, "temperature": 0})
assert again["choices"][0]["token_ids"] == ALONE, again
assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, again
assert again["usage"]["hiq_cached_tokens_by_tier"]["device"] > 0, again
ok("the same prompt again: read from L1 (cached_tokens %d), the same ids" %
   again["usage"]["prompt_tokens_details"]["cached_tokens"])

# Text prompts through the byte-level tokenizer: the prompt "Hello, world!" is those ids.
text = completion({"prompt": "Hello, world!", "max_tokens": 8, "temperature": 0})
assert text["usage"]["prompt_tokens"] == len(ids), text
assert isinstance(text["choices"][0]["text"], str), text
ok("text prompt: tokenized to the same %d ids" % len(ids))

# Streaming gives the same text, then [DONE]; with usage on request.
req = urllib.request.Request(BASE + "/v1/completions", method="POST", headers={**KEY, "Content-Type": "application/json"},
                             data=json.dumps({"prompt": "Hello, world!", "max_tokens": 8, "temperature": 0,
                                              "stream": True, "stream_options": {"include_usage": True}}).encode())
events = []
with urllib.request.urlopen(req, timeout=60) as r:
    assert r.headers["Content-Type"].startswith("text/event-stream"), r.headers
    for line in r.read().decode().split("\n\n"):
        if line.startswith("data: "):
            events.append(line[len("data: "):])
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
assert streamed == text["choices"][0]["text"], (streamed, text)
assert chunks[-1]["usage"]["completion_tokens"] == 8, chunks[-1]
ok("streaming: %d events, the same text, a usage chunk, [DONE]" % len(events))

# Log-probabilities streamed carry the same text_offset as the whole response
# (they used to restart at 0 in every chunk), with and without echo.
def stream_chunks(body):
    req = urllib.request.Request(BASE + "/v1/completions", method="POST",
                                 headers={**KEY, "Content-Type": "application/json"},
                                 data=json.dumps({**body, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [e[len("data: "):] for e in r.read().decode().split("\n\n") if e.startswith("data: ")]
    return [json.loads(e) for e in events[:-1]]
for echo in (False, True):
    body = {"prompt": "Hello, world!", "max_tokens": 6, "temperature": 0, "logprobs": 1, "echo": echo}
    whole = completion(body)["choices"][0]["logprobs"]
    parts = [c["choices"][0]["logprobs"] for c in stream_chunks(body) if c["choices"] and c["choices"][0]["logprobs"]]
    assert sum((p["text_offset"] for p in parts), []) == whole["text_offset"], (parts, whole)
    assert sum((p["tokens"] for p in parts), []) == whole["tokens"], (parts, whole)
    assert whole["text_offset"][-1] > 0, whole
ok("streamed log-probabilities: the whole response's text_offset, with and without echo")

# With n = 2, a choice that stops early sends its finish chunk then, not after
# the other choice's last token. Seeded choices are reproducible: pick a seed
# where a token of choice 0 never comes in choice 1, and stop on it.
for seed in range(1, 50):
    body = {"prompt": ids, "max_tokens": 12, "temperature": 1.0, "seed": seed, "n": 2}
    first, second = (c["token_ids"] for c in completion(body)["choices"])
    if first[1] not in second:
        break
else:
    raise AssertionError("no seed in 1..49 gives choices that differ at token 1")
body = {**body, "stop_token_ids": [first[1]]}
chunks = stream_chunks(body)
finish_0 = next(k for k, c in enumerate(chunks) if c["choices"] and c["choices"][0]["index"] == 0
                and c["choices"][0]["finish_reason"] == "stop")
last_token_1 = max(k for k, c in enumerate(chunks) if c["choices"] and c["choices"][0]["index"] == 1
                   and c["choices"][0].get("token_ids"))
assert finish_0 < last_token_1, (finish_0, last_token_1, chunks)
ok("n = 2 streamed: the choice that stops early finishes at once (chunk %d of %d)" % (finish_0, len(chunks)))

# A stop string cuts the text before it.
full = text["choices"][0]["text"]
if len(full) >= 4:
    stop = full[2:4]
    cut = completion({"prompt": "Hello, world!", "max_tokens": 8, "temperature": 0, "stop": [stop]})
    assert cut["choices"][0]["finish_reason"] == "stop", cut
    assert cut["choices"][0]["text"] == full[:full.index(stop)], (cut, full, stop)
    ok("stop string %r: text cut before it, finish_reason stop" % stop)

# Seeded sampling is reproducible.
a = completion({"prompt": ids, "max_tokens": 8, "temperature": 1.0, "seed": 7})
b = completion({"prompt": ids, "max_tokens": 8, "temperature": 1.0, "seed": 7})
assert a["choices"][0]["token_ids"] == b["choices"][0]["token_ids"], (a, b)
ok("seeded sampling: the same tokens twice")

# Concurrent clients get exactly their own greedy outputs.
prompts = [[(p * 37 + i * 11) % 250 + 1 for i in range(20 + p)] for p in range(8)]
expected = [completion({"prompt": p, "max_tokens": 6, "temperature": 0})["choices"][0]["token_ids"] for p in prompts]
results = [[None] * 3 for _ in prompts]
def client(k):
    for rep in range(3):
        results[k][rep] = completion({"prompt": prompts[k], "max_tokens": 6, "temperature": 0})["choices"][0]["token_ids"]
threads = [threading.Thread(target=client, args=(k,)) for k in range(len(prompts))]
[t.start() for t in threads]
[t.join() for t in threads]
assert all(results[k][r] == expected[k] for k in range(len(prompts)) for r in range(3)), (results, expected)
ok("8 concurrent clients × 3 requests: each its own greedy output")

# Evict the first prompt from L1 (600 slots) with long ones, then ask again:
# its KV comes back from L2 (bf16) and the output is unchanged.
for k in range(8):
    completion({"prompt": [(k * 53 + i * 7) % 250 + 1 for i in range(140)], "max_tokens": 2, "temperature": 0})
restored = completion({"prompt": ids, "max_tokens": 8, "temperature": 0})
assert restored["choices"][0]["token_ids"] == ALONE, restored
host = restored["usage"]["hiq_cached_tokens_by_tier"]["host"]
assert host > 0, restored
ok("after eviction: %d prompt tokens restored from L2, the same greedy ids" % host)

# A client that disconnects mid-stream: its request is cancelled, the server goes on.
s = socket.create_connection(("127.0.0.1", PORT))
body = json.dumps({"prompt": ids, "max_tokens": 400, "temperature": 0, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
          b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
received = b""
while b"data:" not in received:  # the headers, then the first event
    chunk = s.recv(4096)
    assert chunk, received
    received += chunk
s.close()
assert completion({"prompt": ids, "max_tokens": 2, "temperature": 0})["choices"][0]["token_ids"] == ALONE[:2]
ok("a client that disconnects mid-stream does not disturb the server")

# Bad requests: 4xx in OpenAI's shape, and the server lives on.
error_of(*call("POST", "/v1/completions", raw=b"{not json"), 400)
err = error_of(*call("POST", "/v1/completions", {"prompt": ids, "temperature": 5}), 400)
assert err["param"] == "temperature", err
error_of(*call("POST", "/v1/completions", {"prompt": [1, 2, 999]}), 400)
error_of(*call("POST", "/v1/completions", {"prompt": ""}), 400)
error_of(*call("POST", "/v1/completions", {"prompt": list(range(1, 250)) * 3}), 400)  # longer than the context
error_of(*call("POST", "/v1/completions", raw=b"x" * 70000), 413)


def responses_until_close(head, body):
    """Everything the server sends on one connection until it closes it (the test fails on a hang)."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    try:
        s.sendall(head + body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before the whole body was sent
    received = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    s.close()
    return received


def raw_exchange(head, body_parts):
    """A request sent by hand (chunked framing, odd content types) on a connection that
    ends after one response; returns (status, body) of that response."""
    received = responses_until_close(head, b"".join(body_parts))
    head_end = received.find(b"\r\n\r\n")
    length = [int(l.split(b":")[1]) for l in received[:head_end].split(b"\r\n") if l.lower().startswith(b"content-length:")]
    assert received.count(b"HTTP/1.1 ") == 1, received[:300]
    return int(received.split(b" ")[1]), received[head_end + 4:head_end + 4 + length[0]].decode()


# A chunked body over --max-body-bytes is refused as one with a Content-Length is
# (the server used to read it whole, whatever its size).
chunk = b"x" * 16384
parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(64)] + [b"0\r\n\r\n"]
error_of(*raw_exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                       b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", parts), 413)
# A chunked body within the limit is read like any other.
good = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0}).encode()
status, text = raw_exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                            [b"%x\r\n%s\r\n" % (len(good), good), b"0\r\n\r\n"])
assert status == 200 and json.loads(text)["choices"][0]["token_ids"] == ALONE[:1], (status, text)
# curl -d sends application/x-www-form-urlencoded: the body is still the JSON,
# under the same limit (not a form's 8 KiB).
padded = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0, "user": "u" * 20000}).encode()
status, text = raw_exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                            b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(padded), [padded])
assert status == 200, (status, text)
error_of(*raw_exchange(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                       b"Content-Type: multipart/form-data; boundary=b\r\nConnection: close\r\n"
                       b"Content-Length: 4\r\n\r\n", [b"--b-"]), 415)



# A refused body that is not read to its end closes its connection: its unread
# bytes (here a request hidden past the first 4 KiB) are never served as a next
# request. The same for any path, routed or not.
hidden = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
multipart = b"A" * 5000 + hidden
out = responses_until_close(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                            b"Content-Type: multipart/form-data; boundary=XX\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(multipart), multipart)
assert out.startswith(b"HTTP/1.1 415") and out.count(b"HTTP/1.1 ") == 1, out[:300]
get_body = b"G" * 5000 + hidden  # a body on a GET, which no one reads
out = responses_until_close(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(get_body), get_body)
assert out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1 ") == 1, out[:300]
big = b"B" * 5000 + hidden + b"C" * 100000
for path in (b"/v1/completions", b"/flush_cache", b"/no/such/route"):
    out = responses_until_close(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n", b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big))
    assert out.startswith(b"HTTP/1.1 413") and out.count(b"HTTP/1.1 ") == 1, (path, out[:300])
error_of(*call("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 400)
error_of(*call("GET", "/v1/nothing"), 404)
ok("bad requests: 400 (JSON, temperature, token id, empty, too long, no chat template), 413 (also chunked), 415, 404")
assert completion({"prompt": ids, "max_tokens": 1, "temperature": 0})["choices"][0]["token_ids"] == ALONE[:1]

# Metrics show what happened.
status, metrics = call("GET", "/metrics", headers={})
assert status == 200
values = {}
for line in metrics.splitlines():
    if line and not line.startswith("#"):
        key, value = line.rsplit(" ", 1)
        values[key] = float(value)
def metric(name):
    assert name in values, f"{name} missing from /metrics:\n{metrics}"
    return values[name]
assert metric('hiq:cached_prompt_tokens_total{tier="host"}') > 0, metrics
assert metric('hiq:cached_prompt_tokens_total{tier="device"}') > 0, metrics
assert metric("sglang:generation_tokens_total") > 0, metrics
assert metric("hiq:load_back_tokens_total") > 0, metrics
assert metric('hiq:transfer_bytes_total{direction="load_back"}') > 0, metrics
assert metric('hiq:transfer_seconds_total{direction="backup"}') > 0, metrics
assert metric('hiq:scheduler_steps_total{kind="prefill"}') > 0, metrics
assert metric('hiq:scheduler_steps_total{kind="decode"}') > 0, metrics
assert metric('hiq:scheduler_step_seconds_total{kind="prefill"}') > 0, metrics
assert "sglang:time_to_first_token_seconds_bucket" in metrics, metrics
assert metric('sglang:num_requests_total{reason="abort"}') >= 1, metrics  # the client that went away
ok("/metrics: cached tokens by tier, load-back, generated tokens, scheduler steps, TTFT histogram, the aborted request")

assert call("POST", "/flush_cache")[0] == 200
# Flushes that arrive together are each answered (they used to share one result).
flushes = [None] * 8
def flush(k):
    flushes[k] = call("POST", "/flush_cache")[0]
threads = [threading.Thread(target=flush, args=(k,)) for k in range(len(flushes))]
[t.start() for t in threads]
[t.join() for t in threads]
assert flushes == [200] * len(flushes), flushes
ok("/flush_cache, alone and 8 at once")
print(f"{checks} HTTP checks passed")
PY

# A soak: the load generator, 192 requests each time, against the running
# server. No request fails, no L1 slot leaks (all free after a flush), and a
# second round costs no memory the first did not.
soak() {
  "$HIQ" bench serve --port "$PORT" --api-key secret --gsp-num-groups 16 --gsp-prompts-per-group 12 \
    --gsp-system-prompt-len 80 --gsp-question-len 12 --gsp-output-len 6 --max-concurrency 8 --json \
    >"$TMP/soak.json" 2>"$TMP/soak.err" || { cat "$TMP/soak.err" "$TMP/soak.json" >&2; echo "FAIL: hiq bench serve" >&2; exit 1; }
  python3 - "$TMP/soak.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] == 192 and r["failed"] == 0, r
assert r["completion_tokens"] == 192 * 6, r
assert r["hit_rate"] > 0.5, r
PY
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
soak
echo "ok   hiq bench serve: 192 requests, none failed, shared prefixes hit"
first_rss=$(rss)
soak
second_rss=$(rss)
# Sanitizer builds keep freed memory in quarantine: their resident size says nothing.
sanitized=0
[[ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]] && sanitized=1
python3 - "$PORT" "$first_rss" "$second_rss" "$sanitized" <<'PY'
import json, sys, urllib.request
port, first, second, sanitized = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
req = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", method="POST", data=b"",
                             headers={"Authorization": "Bearer secret"})
assert urllib.request.urlopen(req, timeout=30).status == 200
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
values = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
assert float(values["hiq:device_free_slots"]) == float(values["hiq:device_slots"]), values
assert float(values["sglang:num_running_reqs"]) == 0 and float(values["sglang:num_queue_reqs"]) == 0, values
assert sanitized or second - first < 4096, f"resident memory grew by {second - first} KB over the second soak"
print(f"ok   soak: every L1 slot free after a flush; resident memory {first} KB → {second} KB over the second round")
PY

# The in-process mode: a server of its own on the same checkpoint.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 1024 --hicache-codec int8 --gsp-num-groups 4 \
  --gsp-prompts-per-group 4 --gsp-system-prompt-len 64 --gsp-question-len 8 --gsp-output-len 4 --json \
  >"$TMP/inproc.json" 2>/dev/null || { echo "FAIL: hiq bench serve --model" >&2; exit 1; }
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["requests"]==16 and r["failed"]==0 and r["server"]["l1_slots"]==1024, r' "$TMP/inproc.json"
echo "ok   hiq bench serve --model: an in-process server, 16 requests"

# --compare: one loaded model, a fresh cache per configuration; the first two
# repeats run forward, then backward (tools/hiq/compare_order.h). L1 holds ~2 groups of 12, so the host tier must serve
# hits; the equal-capacity flag gives every codec the same L2 tokens.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 320 --hicache-tokens 2048 --gsp-num-groups 12 \
  --gsp-prompts-per-group 3 --gsp-system-prompt-len 96 --gsp-question-len 8 --gsp-output-len 4 --max-concurrency 2 \
  --compare none,bf16,int8/128,int4h,k=int8,v=int4h --repeats 2 --json >"$TMP/compare.jsonl" 2>"$TMP/compare.err" \
  || { cat "$TMP/compare.err" >&2; echo "FAIL: hiq bench serve --compare" >&2; exit 1; }
python3 - "$TMP/compare.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
order = [r["config"] for r in runs]
assert order == ["none", "bf16", "int8/128", "int4h", "k=int8,v=int4h",
                 "k=int8,v=int4h", "int4h", "int8/128", "bf16", "none"], order
for r in runs:
    assert r["requests"] == 36 and r["failed"] == 0, r
    s = r["server"]
    if r["config"] == "none":
        assert s["l2_capacity_tokens"] == 0 and r["cached_host_tokens"] == 0, r
        continue
    assert s["l2_capacity_tokens"] == 2048 and s["l2_bytes_per_token"] * 2048 == s["l2_reserved_bytes"], s
    assert r["cached_host_tokens"] > 0 and r["transfer"]["load_tokens"] >= r["cached_host_tokens"], r
    assert r["transfer"]["load_bytes"] == r["transfer"]["load_tokens"] * s["l2_bytes_per_token"], r
none = max(r["hit_rate"] for r in runs if r["config"] == "none")
assert all(r["hit_rate"] > none for r in runs if r["config"] != "none"), runs
split = [r for r in runs if r["config"] == "k=int8,v=int4h"]
assert all(r["server"]["l2_codec"] == "k=int8,v=int4h" for r in split), split
print("ok   hiq bench serve --compare: 10 paired runs, forward then backward; every host tier restores")
PY
for args in "--compare int8/3|--record-align must be a power of two" "--compare int3|unknown codec 'int3'" \
            "--compare bf16,,int8|an empty entry" "--compare int8/x|the alignment after '/'" \
            "--compare int8,int8|given twice" "--compare k=int8,v=int9|unknown codec 'int9'" \
            "--compare int8@cpu|int8 is not a ladder" "--compare tiered:int8,int4h@tpu|not '@tpu'" \
            "--compare tiered:int8,int4h@gpu|needs device cuda"; do
  if "$HIQ" bench serve --model "$MODEL" ${args%%|*} >/dev/null 2>"$TMP/compare.err"; then
    echo "FAIL: hiq bench serve ${args%%|*} was accepted" >&2; exit 1
  fi
  grep -qF -- "${args#*|}" "$TMP/compare.err" || { cat "$TMP/compare.err" >&2; echo "FAIL: ${args%%|*}" >&2; exit 1; }
done
echo "ok   hiq bench serve --compare: bad configurations refused, each naming its entry"

# A ladder's entry may say where it demotes: "@cpu" runs the same ladder on
# host threads, beside the default, in one process and one balanced order.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 320 --hicache-tokens 1024 --gsp-num-groups 12 \
  --gsp-prompts-per-group 3 --gsp-system-prompt-len 96 --gsp-question-len 8 --gsp-output-len 4 --max-concurrency 2 \
  --compare int4h,tiered:int8,int4h@cpu,tiered:int8,int4h --no-warmup --json >"$TMP/ladder.jsonl" \
  2>"$TMP/ladder.err" || { cat "$TMP/ladder.err" >&2; echo "FAIL: hiq bench serve --compare …@cpu" >&2; exit 1; }
python3 - "$TMP/ladder.jsonl" <<'PY'
import json, sys
runs = {r["config"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(runs) == ["int4h", "tiered:int8,int4h", "tiered:int8,int4h@cpu"], sorted(runs)
for label in ("tiered:int8,int4h", "tiered:int8,int4h@cpu"):
    s = runs[label]["server"]
    assert s["l2_codec"] == "tiered:int8,int4h" and s["demotion"]["device"] == "cpu", s
    assert s["demotion"]["tokens"] > 0 and s["rungs"][1]["load_back_tokens"] > 0, s
assert "demotion" not in runs["int4h"]["server"], runs["int4h"]["server"]
PY
echo "ok   hiq bench serve --compare tiered:int8,int4h@cpu: the ladder demotes on host threads, and restores its last rung"

# Chat completions need a tokenizer with ChatML's tokens: a second server on
# a tiny random checkpoint written here, with the Qwen2-style test tokenizer.
CHAT="$TMP/chat-model"
"$(dirname "$0")/../scripts/make-demo-model" "$CHAT" --vocab 1024 --hidden 32 --intermediate 64 --layers 2 \
  --heads 2 --kv-heads 1 --head-dim 16 --max-position 300 --dtype f32 --seed 3 \
  --tokenizer "$(dirname "$0")/data/tokenizers/qwen2-style/tokenizer.json" 2>/dev/null
"$HIQ" serve --model "$CHAT" --port 0 --max-total-tokens 512 2>"$TMP/chat.log" &
CHAT_PID=$!
for _ in $(seq 1 200); do grep -q "listening on" "$TMP/chat.log" && break; sleep 0.05; done
CHAT_PORT="$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$TMP/chat.log")"
# Without --threads: a thread for each of the 256 running requests, and 32 beside them.
grep -q "(288 connections at once)" "$TMP/chat.log" || { cat "$TMP/chat.log" >&2; echo "FAIL: default --threads" >&2; exit 1; }
echo "ok   --threads 0 (the default): --max-running-requests + 32 connections at once"
python3 - "$CHAT_PORT" <<'PY'
import json, sys, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
def post(body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=60)
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Où est la bibliothèque ?"}]
whole = json.loads(post({"messages": messages, "max_tokens": 6, "temperature": 0}).read())
choice = whole["choices"][0]
assert whole["object"] == "chat.completion" and choice["message"]["role"] == "assistant", whole
assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("length", "stop"), whole
assert whole["usage"]["prompt_tokens"] > 10 and "token_ids" not in choice, whole
events = [e[len("data: "):] for e in post({"messages": messages, "max_tokens": 6, "temperature": 0, "stream": True})
          .read().decode().split("\n\n") if e.startswith("data: ")]
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks
content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
assert content == choice["message"]["content"], (content, choice)
assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"], chunks[-1]
print("ok   chat completions through ChatML and a BPE tokenizer: whole and streamed agree")
# The model's 300 positions bound a request, not L1's 512 slots.
models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=60).read())
assert models["data"][0]["max_model_len"] == 300, models
def completion(body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
status, body = completion({"prompt": list(range(10, 300)), "max_tokens": 100, "temperature": 0, "ignore_eos": True})
assert status == 200 and body["usage"]["completion_tokens"] == 10 and body["choices"][0]["finish_reason"] == "length", body
status, body = completion({"prompt": list(range(10, 310)), "max_tokens": 1})
assert status == 400 and "context of 300" in body["error"]["message"], body
assert body["error"]["code"] == "context_length_exceeded" and body["error"]["param"] == "prompt", body
try:
    post({"messages": [{"role": "user", "content": "Où est la bibliothèque ? " * 60}], "max_tokens": 1})
    raise AssertionError("a chat over the context was answered")
except urllib.error.HTTPError as e:
    err = json.loads(e.read())["error"]
    assert e.code == 400 and err["code"] == "context_length_exceeded" and err["param"] == "messages", err
print("ok   the model's max_position_embeddings bounds prompt + output (max_model_len 300 with 512 L1 slots)")
PY
kill -TERM "$CHAT_PID"
wait "$CHAT_PID" || { echo "FAIL: the chat server did not stop cleanly" >&2; exit 1; }
CHAT_PID=""

kill -TERM "$PID"
for _ in $(seq 1 200); do
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
if kill -0 "$PID" 2>/dev/null; then
  echo "FAIL: hiq serve still runs 10 s after SIGTERM" >&2
  exit 1
fi
wait "$PID" && rc=0 || rc=$?
PID=""
[[ $rc -eq 0 ]] || { cat "$TMP/log" >&2; echo "FAIL: hiq serve exited $rc after SIGTERM" >&2; exit 1; }
grep -q "stopped" "$TMP/log" || { cat "$TMP/log" >&2; echo "FAIL: no graceful stop in the log" >&2; exit 1; }
echo "ok   SIGTERM: graceful stop, exit 0"
