#!/usr/bin/env bash
# `hiq serve` at its edges, run as an operator would on the committed tiny
# checkpoint:
#   - flags out of range are refused with exit 1 and the flag named (never an
#     abort, never a server that accepts and does not answer);
#   - a bounded queue answers 503 with Retry-After once full, and counts it;
#   - a client that leaves a whole (non-streamed) request cancels it;
#   - SIGTERM with requests in flight (one streamed, one whole, one queued)
#     answers each with finish_reason "abort" and exits 0 well within
#     --shutdown-timeout.
# Nothing here depends on timing: the queue is read from /metrics before the
# next request is sent, and the in-flight requests are seen streaming first.
#
# Usage: HIQ=/path/to/hiq tests/cli_serve_lifecycle_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
HERE="$(cd "$(dirname "$0")" && pwd)"
MODEL="$HERE/data/models/tiny-qwen3"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
if [[ -n "${TSAN_OPTIONS:-}" ]]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$HERE/tsan.supp"
fi
if "$HIQ" serve --help 2>&1 | grep -q "not in this build"; then
  echo "SKIP: this hiq has no HTTP server" >&2
  exit 77
fi
# shellcheck source=lib/serve.sh
source "$HERE/lib/serve.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_lifecycle_test.XXXXXX")"
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null || true
  rm -rf -- "$TMP"
}
trap cleanup EXIT

# ---- flags -------------------------------------------------------------------------------------
refuse() {  # expected text, flags...
  local want=$1
  shift
  local rc=0 port=(--port 0)
  [[ " $* " == *" --port "* ]] && port=()
  "$HIQ" serve --model "$MODEL" "${port[@]}" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null & local pid=$!
  # A refused flag ends the process at once; a server that starts is a failure.
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    if grep -q "listening on" "$TMP/err"; then
      kill -9 "$pid"
      echo "FAIL: hiq serve $* started instead of refusing" >&2
      exit 1
    fi
    sleep 0.05
  done
  wait "$pid" || rc=$?
  [[ $rc -eq 1 ]] || { cat "$TMP/err" >&2; echo "FAIL: hiq serve $*: exit $rc, expected 1" >&2; exit 1; }
  grep -qF -- "$want" "$TMP/err" || { cat "$TMP/err" >&2; echo "FAIL: hiq serve $*: no '$want'" >&2; exit 1; }
}
refuse "--max-prompt-tokens" --max-prompt-tokens 0
refuse "--max-body-bytes" --max-body-bytes 0
refuse "--context-length" --context-length -1
refuse "--max-tokens-limit" --max-tokens-limit 0
refuse "--threads must be in [1, 4096]" --threads -1
refuse "--threads must be in [1, 4096]" --threads 5000
refuse "--page-size must be in [1, 1048576]" --page-size 2000000
refuse "--port must be in [0, 65535]" --port 70000
refuse "--max-queued-requests must not be negative" --max-queued-requests -1
refuse "--shutdown-timeout" --shutdown-timeout 0
refuse "--log-level" --log-level loud
refuse "--reasoning-parser" --reasoning-parser gpt
refuse "--device must be cpu or cuda" --device tpu
refuse "--cuda-graph-max-bs must be in [1, 1024]" --cuda-graph-max-bs 0
echo "ok   out-of-range flags: exit 1 naming the flag"

# A lowered --max-tokens-limit is a working server (it once aborted on its own default).
serve_start "$TMP/limit.log" --model "$MODEL" --port 0 --max-tokens-limit 64
python3 - "$PORT" <<'PY'
import json, sys, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
def post(body):
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
status, body = post({"prompt": [1, 2, 3], "max_tokens": 64, "ignore_eos": True})
assert status == 200 and body["usage"]["completion_tokens"] == 64, (status, body)
status, body = post({"prompt": [1, 2, 3], "max_tokens": 65})
assert status == 400 and body["error"]["param"] == "max_tokens", (status, body)
PY
kill -TERM "$PID"; wait "$PID"; PID=""
echo "ok   --max-tokens-limit 64: served up to it, 65 refused"

# ---- a client that leaves a whole (non-streamed) request --------------------------------------
# Its request is cancelled (finish_reason abort) instead of running to its
# 25,000 tokens: the outcome is counted by reason, so nothing depends on timing.
# The tiny model has 512 positions; --context-length lets a request run past them.
serve_start "$TMP/leave.log" --model "$MODEL" --port 0 --max-total-tokens 60000 --context-length 60000
python3 - "$PORT" "$HERE/lib" <<'PY'
import json, socket, sys

port = int(sys.argv[1])
sys.path.insert(0, sys.argv[2])
import server_metrics
from server_metrics import wait_for
metric = lambda name: server_metrics.metric(f"http://127.0.0.1:{port}", name)

body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 25000, "ignore_eos": True, "temperature": 0}).encode()
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
wait_for(lambda: metric("sglang:num_running_reqs") == 1, "the request running")
s.close()
wait_for(lambda: metric("sglang:num_running_reqs") == 0, "the request ending")
wait_for(lambda: metric('sglang:num_requests_total{reason="abort"}') == 1, "the request counted")
assert metric('sglang:num_requests_total{reason="length"}') == 0
generated = metric("sglang:generation_tokens_total")
assert 0 < generated < 25000, generated
print(f"ok   a client that leaves a whole request cancels it ({generated:.0f} of 25000 tokens generated)")
PY
kill -TERM "$PID"; wait "$PID"; PID=""

# ---- the queue bound and SIGTERM with requests in flight ---------------------------------------
serve_start "$TMP/serve.log" --model "$MODEL" --port 0 --max-total-tokens 60000 --context-length 60000 \
  --max-running-requests 2 --max-queued-requests 1 --shutdown-timeout 20
python3 - "$PORT" "$PID" "$HERE/lib" <<'PY'
import json, os, signal, sys, threading, time, urllib.error, urllib.request

port, pid = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import server_metrics
from server_metrics import wait_for
base = f"http://127.0.0.1:{port}"
LONG = {"max_tokens": 25000, "ignore_eos": True, "temperature": 0}

metric = lambda name: server_metrics.metric(base, name)

results = {}
first_bytes = {"stream": threading.Event(), "whole": threading.Event()}

def streamed():
    req = urllib.request.Request(base + "/v1/completions",
                                 json.dumps({"prompt": [1, 2, 3], "stream": True, **LONG}).encode(),
                                 {"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
                first_bytes["stream"].set()
    results["stream"] = events

def whole(name, prompt):
    req = urllib.request.Request(base + "/v1/completions", json.dumps({"prompt": prompt, **LONG}).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            results[name] = (r.status, json.load(r), dict(r.headers))
    except urllib.error.HTTPError as e:
        results[name] = (e.code, json.load(e), dict(e.headers))

# One at a time, each admitted before the next is sent: the queue bound counts
# a request from its arrival until its admission.
threads = [threading.Thread(target=streamed), threading.Thread(target=whole, args=("whole", [4, 5, 6]))]
threads[0].start()
first_bytes["stream"].wait(120)
wait_for(lambda: metric("sglang:num_running_reqs") == 1, "the streamed request running")
threads[1].start()
wait_for(lambda: metric("sglang:num_running_reqs") == 2, "two running requests")
queued = threading.Thread(target=whole, args=("queued", [7, 8, 9]))
queued.start()
wait_for(lambda: metric("sglang:num_queue_reqs") == 1, "one queued request")
whole("refused", [10, 11])
status, body, headers = results["refused"]
assert status == 503, (status, body)
assert headers.get("Retry-After") == "1", headers
assert body["error"]["type"] == "service_unavailable_error" and "queue is full" in body["error"]["message"], body
assert metric('hiq:rejected_requests_total{reason="queue_full"}') == 1
print("ok   --max-queued-requests 1: the next request gets 503 with Retry-After, counted in /metrics")

# A flush while requests run is refused as the client's mistake (400), not a server error.
req = urllib.request.Request(base + "/flush_cache", b"", method="POST")
try:
    urllib.request.urlopen(req, timeout=30)
    raise SystemExit("FAIL: /flush_cache under load answered 200")
except urllib.error.HTTPError as e:
    body = json.load(e)
    assert e.code == 400 and "requests are running" in body["error"]["message"], (e.code, body)
print("ok   /flush_cache while requests run: 400")

start = time.monotonic()
os.kill(pid, signal.SIGTERM)
for t in threads + [queued]:
    t.join(60)
    assert not t.is_alive(), "a client was left waiting after SIGTERM"
took = time.monotonic() - start
events = results["stream"]
assert events[-1] == "[DONE]", events[-3:]
assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort", events[-2]
for name in ("whole", "queued"):
    status, body, _ = results[name]
    assert status == 200, (name, status, body)
    assert body["choices"][0]["finish_reason"] == "abort", (name, body["choices"][0]["finish_reason"])
    assert body["usage"]["completion_tokens"] < LONG["max_tokens"], body["usage"]
print(f"ok   SIGTERM: the streamed, the running and the queued request answered with finish_reason abort "
      f"({took:.2f} s)")
PY
rc=0
for _ in $(seq 1 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
kill -0 "$PID" 2>/dev/null && { echo "FAIL: hiq serve still runs 10 s after SIGTERM" >&2; exit 1; }
wait "$PID" || rc=$?
PID=""
[[ $rc -eq 0 ]] || { cat "$TMP/serve.log" >&2; echo "FAIL: exit $rc after SIGTERM" >&2; exit 1; }
grep -q "SIGTERM, shutting down" "$TMP/serve.log" && grep -q "stopped" "$TMP/serve.log" \
  || { cat "$TMP/serve.log" >&2; echo "FAIL: no graceful stop in the log" >&2; exit 1; }
echo "ok   SIGTERM: exit 0 within the grace period"
