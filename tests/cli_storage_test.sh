#!/usr/bin/env bash
# The third tier as an operator meets it: `hiq serve` on the committed tiny
# checkpoint with a storage backend, driven over HTTP.
#   file:  a server computes prompts and writes them to a directory; a
#          restarted server (a new process) fetches them from it, restores
#          them and answers with the same greedy ids; a server killed with
#          SIGKILL leaves nothing that a restart would read wrongly; under
#          write_back, what L2 evicts is written then, and a restart
#          serves it.
#   redis: two servers on one Redis share prefixes; a server with another
#          codec on the same Redis finds none of them; Redis killed mid-run
#          costs only recomputation (errors counted, answers unchanged), and
#          the server uses Redis again once it is back.
# Redis parts need redis-server (scripts/bootstrap installs it); without it
# they are skipped and the test says so.
#
# Usage: HIQ=/path/to/hiq tests/cli_storage_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
MODEL="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
if [[ -n "${TSAN_OPTIONS:-}" ]]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"
fi
if "$HIQ" serve --help 2>&1 | grep -q "not in this build"; then
  echo "SKIP: this hiq has no HTTP server (cpp-httplib missing at build time)" >&2
  exit 77
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_storage_test.XXXXXX")"
trap 'pkill -P $$ 2>/dev/null || true; rm -rf -- "$TMP"' EXIT

python3 - "$HIQ" "$MODEL" "$TMP" <<'PY'
import atexit, json, os, re, shutil, signal, socket, subprocess, sys, time, urllib.error, urllib.request

HIQ, MODEL, TMP = sys.argv[1:4]
servers = []


@atexit.register
def stop_all():  # no server or redis-server outlives the test, whatever happened
    for p in servers:
        if p.poll() is None:
            p.kill()
            p.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(name, storage_args, codec="bf16", ratio="4"):  # bf16: restored KV is the computed KV, bit for bit
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([HIQ, "serve", "--model", MODEL, "--port", "0", "--max-total-tokens", "400",
                          "--hicache-codec", codec, "--hicache-ratio", ratio, "--hicache-storage-block-tokens", "16",
                          "--hicache-storage-prefetch-policy", "wait_complete", *storage_args],
                         stdout=log, stderr=log)
    servers.append(p)
    for _ in range(400):
        text = open(log.name).read()
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        if found:
            return p, f"http://127.0.0.1:{found.group(1)}"
        if p.poll() is not None:
            sys.exit(f"FAIL: {name} exited:\n{text}")
        time.sleep(0.05)
    sys.exit(f"FAIL: {name} did not start")


def stop(p, sig=signal.SIGTERM):
    p.send_signal(sig)
    p.wait(timeout=60)


def completion(base, prompt):
    req = urllib.request.Request(base + "/v1/completions", method="POST",
                                 data=json.dumps({"prompt": prompt, "max_tokens": 6, "temperature": 0}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def metrics(base):
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def metric(base, name):
    return float(metrics(base).get(name, "0"))


def wait_for(base, name, at_least):
    for _ in range(400):
        if metric(base, name) >= at_least:
            return
        time.sleep(0.05)
    sys.exit(f"FAIL: {name} never reached {at_least}: {metrics(base)}")


def by_tier(r, tier):
    return r["usage"]["hiq_cached_tokens_by_tier"].get(tier, 0)


PROMPTS = [[(7 * i + 13 * j) % 250 + 2 for j in range(100)] for i in range(3)]  # 6 whole blocks of 16 each
WRITTEN = 'hiq:storage_blocks_total{op="written"}'
FETCHED = 'hiq:storage_blocks_total{op="fetched"}'

# ---- file: warm restart ----------------------------------------------------
l3 = os.path.join(TMP, "l3")
file_args = ["--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config",
             json.dumps({"path": l3, "size": "64MB", "prefetch_threshold": 16})]
p, base = serve("file-1", file_args)
cold = [completion(base, prompt) for prompt in PROMPTS]
wait_for(base, WRITTEN, 3 * 6)
stop(p)
print("ok   file: a server wrote its prompts' 18 blocks to", l3)

p, base = serve("file-2", file_args)
for prompt, first in zip(PROMPTS, cold):
    warm = completion(base, prompt)
    assert warm["choices"][0]["token_ids"] == first["choices"][0]["token_ids"], (warm, first)
    assert by_tier(warm, "storage") == 96, warm  # every whole block but the last token's
assert metric(base, FETCHED) == 18, metrics(base)
assert metric(base, 'hiq:cached_prompt_tokens_total{tier="storage"}') == 3 * 96, metrics(base)
print("ok   file: a restarted server restores all 96 stored tokens of each prompt, the same greedy ids")

# SIGKILL while writing, then a restart: what was whole is served, nothing else.
more = [[(11 * i + 5 * j) % 250 + 2 for j in range(100)] for i in range(4)]
more_cold = [completion(base, prompt) for prompt in more]
stop(p, signal.SIGKILL)
with open(os.path.join(l3, "stray.tmp"), "wb") as f:  # what a killed write leaves behind
    f.write(b"partial")
p, base = serve("file-3", file_args)
for prompt, first in zip(PROMPTS, cold):
    r = completion(base, prompt)
    assert r["choices"][0]["token_ids"] == first["choices"][0]["token_ids"], (r, first)
    assert by_tier(r, "storage") == 96, r
for prompt, first in zip(more, more_cold):  # whatever of them was whole on disk, served right
    r = completion(base, prompt)
    assert r["choices"][0]["token_ids"] == first["choices"][0]["token_ids"], (r, first)
assert metric(base, 'hiq:storage_errors_total{kind="corrupt"}') == 0, metrics(base)
stop(p)
print("ok   file: after a SIGKILL mid-write, a restart serves whole blocks only, nothing corrupt")

# write_back: storage is written when L2 evicts (L1 400 and L2 400 tokens
# cannot hold ten prompts of 100), and only then.
wb_args = ["--hicache-write-policy", "write_back", "--hicache-storage-backend", "file", "--hicache-storage-size", "64MB",
           "--hicache-storage-backend-extra-config",
           json.dumps({"path": os.path.join(TMP, "l3-write-back"), "prefetch_threshold": 16})]
ten = [[(13 * i + 7 * j) % 250 + 2 for j in range(100)] for i in range(10)]
p, base = serve("write-back-1", wb_args, ratio="1")
ten_cold = [completion(base, prompt) for prompt in ten]
wait_for(base, 'hiq:storage_blocks_total{op="written_at_eviction"}', 6)
assert metric(base, WRITTEN) == metric(base, 'hiq:storage_blocks_total{op="written_at_eviction"}'), metrics(base)
stop(p)
p, base = serve("write-back-2", wb_args, ratio="1")
r = completion(base, ten[0])  # the least recently used: the first to leave L2
assert r["choices"][0]["token_ids"] == ten_cold[0]["choices"][0]["token_ids"], (r, ten_cold[0])
assert by_tier(r, "storage") == 96, r
stop(p)
print("ok   file: under write_back, L2's evictions are stored then, and a restart serves them")

# ---- redis: sharing, foreign fingerprints, a Redis that dies ----------------
redis = shutil.which("redis-server")
if redis is None:
    print("SKIP redis: redis-server is not installed (scripts/bootstrap installs it)")
    sys.exit(0)
rport = free_port()
rdir = os.path.join(TMP, "redis")
os.mkdir(rdir)


def start_redis():
    r = subprocess.Popen([redis, "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", rdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers.append(r)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", rport), timeout=0.2).close()
            return r
        except OSError:
            time.sleep(0.05)
    sys.exit("FAIL: redis-server did not start")


rs = start_redis()
redis_args = ["--hicache-storage-backend", "redis", "--hicache-storage-backend-extra-config",
              json.dumps({"host": "127.0.0.1", "port": rport, "prefetch_threshold": 16,
                          "reconnect_initial_ms": 50, "reconnect_max_ms": 200})]
a, base_a = serve("redis-a", redis_args)
b, base_b = serve("redis-b", redis_args)
firsts = [completion(base_a, prompt) for prompt in PROMPTS]
wait_for(base_a, WRITTEN, 18)
for prompt, first in zip(PROMPTS, firsts):
    shared = completion(base_b, prompt)
    assert shared["choices"][0]["token_ids"] == first["choices"][0]["token_ids"], (shared, first)
    assert by_tier(shared, "storage") == 96, shared
print("ok   redis: a second server on the same Redis serves the first one's prefixes from it")

c, base_c = serve("redis-fp8", redis_args, codec="fp8")
for prompt in PROMPTS:
    assert by_tier(completion(base_c, prompt), "storage") == 0
stop(c)
print("ok   redis: a server of another codec on the same Redis finds none of them")

rs.send_signal(signal.SIGKILL)
rs.wait()
fresh = [[(3 * i + 17 * j) % 250 + 2 for j in range(100)] for i in range(2)]
down = [completion(base_b, prompt) for prompt in fresh]  # answered without Redis
for _ in range(100):
    if sum(metric(base_b, f'hiq:storage_errors_total{{kind="{k}"}}') for k in ("write", "probe", "fetch")) > 0:
        break
    time.sleep(0.05)
else:
    sys.exit(f"FAIL: no storage error counted with Redis down: {metrics(base_b)}")
rs = start_redis()  # empty: nothing of before survives
time.sleep(0.5)      # past the reconnect backoff
again = [completion(base_b, prompt) for prompt in fresh]
for x, y in zip(down, again):
    assert x["choices"][0]["token_ids"] == y["choices"][0]["token_ids"], (x, y)
written = metric(base_b, WRITTEN)
newer = [[(5 * i + 19 * j) % 250 + 2 for j in range(100)] for i in range(2)]
for prompt in newer:
    completion(base_b, prompt)
wait_for(base_b, WRITTEN, written + 12)  # b writes to the Redis that came back
print("ok   redis: killed mid-run, requests are recomputed and errors counted; back, it is written again")
for p in (a, b):
    stop(p)
PY
echo "ok   cli_storage"
