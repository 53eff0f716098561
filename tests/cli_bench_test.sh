#!/usr/bin/env bash
# `hiq bench transfer` run as a user would: bad flags fail with a message that
# names the flag, before any GPU work; on a machine without a usable GPU the
# command says so and exits 1. (On a GPU machine, scripts/gpu-check runs it.)
# And `hiq bench serve`: a flag of one mode (in-process with --model, or
# against a running server) typed in the other is refused by name. And
# `hiq bench demotion` on the CPU: its JSON, and bad flags refused by name.
# And `hiq bench gemm --prefill`: a bad list refused by name.
#
# Usage: HIQ=/path/to/hiq tests/cli_bench_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_bench_test.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

checks=0
pass() { checks=$((checks + 1)); echo "ok   $*"; }
fail() {
  echo "FAIL $*" >&2
  exit 1
}

# expect_error "substring" ARGS...: `hiq bench transfer ARGS` exits 1 and its
# stderr contains the substring.
expect_error() {
  local want="$1"; shift
  local rc=0
  "$HIQ" bench transfer "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "hiq bench transfer $* exited $rc, expected 1"
  grep -qF -- "$want" "$TMP/err" || fail "hiq bench transfer $*: stderr lacks '$want': $(cat "$TMP/err")"
  pass "hiq bench transfer $* → $want"
}

expect_error "--batches: '0'" --batches 0
expect_error "--batches: 'x'" --batches 2048,x
expect_error "unknown codec 'int3'" --hicache-codec int8,int3
expect_error "--record-align" --record-align 0
expect_error "--gpu-sms must be positive" --gpu-sms 0
expect_error "--seconds must be positive" --seconds 0
expect_error "unknown model" --model no-such-model

gpus="$("$HIQ" devices --json)"
if grep -q '"devices": \[\]' <<<"$gpus"; then
  # No GPU here: the benchmark explains why instead of failing obscurely.
  rc=0
  "$HIQ" bench transfer --batches 1 >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "without a GPU, hiq bench transfer exited $rc, expected 1"
  grep -qE "no usable CUDA device|no CUDA backend" "$TMP/err" || fail "unclear error without a GPU: $(cat "$TMP/err")"
  pass "without a GPU: $(cat "$TMP/err")"
  rc=0
  "$HIQ" bench gemm --prefill 2048 >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "without a GPU, hiq bench gemm --prefill exited $rc, expected 1"
  grep -qE "no usable CUDA device|no CUDA backend" "$TMP/err" || fail "unclear error without a GPU: $(cat "$TMP/err")"
  pass "without a GPU, bench gemm --prefill: $(cat "$TMP/err")"
fi

# `hiq bench gemm --prefill` refuses a bad list by name before any GPU work.
for bad in 0 2048,x 70000; do
  rc=0
  "$HIQ" bench gemm --prefill "$bad" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "hiq bench gemm --prefill $bad exited $rc, expected 1"
  grep -qF -- "--prefill" "$TMP/err" || fail "hiq bench gemm --prefill $bad: stderr lacks '--prefill': $(cat "$TMP/err")"
  pass "hiq bench gemm --prefill $bad → $(cat "$TMP/err")"
done

# `hiq bench serve` has two modes: against a running server (--host, --port,
# --api-key) or against one it starts in-process (--model and the flags that
# configure it: --device, --hicache-*, --max-total-tokens, ...). A flag of one
# mode typed in the other is refused, naming it, before any request is sent:
# the stack flags used to be ignored in silence against a running server.
# expect_serve_error "substring" ARGS...
expect_serve_error() {
  local want="$1"; shift
  local rc=0
  timeout 60 "$HIQ" bench serve "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "hiq bench serve $* exited $rc, expected 1: $(cat "$TMP/err")"
  grep -q "^hiq bench serve: error: " "$TMP/err" || fail "hiq bench serve $*: not a hiq error: $(cat "$TMP/err")"
  grep -qF -- "$want" "$TMP/err" || fail "hiq bench serve $*: stderr lacks '$want': $(cat "$TMP/err")"
  pass "hiq bench serve $* → $(cat "$TMP/err")"
}
if "$HIQ" bench serve --help 2>&1 | grep -q "not in this build"; then
  echo "note: this hiq has no HTTP client; the hiq bench serve checks do not apply" >&2
else
  # Port 9 (discard) on loopback: nothing listens, and nothing may be sent.
  remote=(--port 9 --vocab-size 1000 --gsp-num-groups 1 --gsp-prompts-per-group 1)
  expect_serve_error "--hicache-codec: these configure the in-process server, which only --model starts" \
    "${remote[@]}" --hicache-codec int4
  expect_serve_error "--device, --max-total-tokens, --hicache-size, --hicache-codec: these configure" \
    "${remote[@]}" --hicache-codec int8 --device cuda --hicache-size 8GB --max-total-tokens 4096
  expect_serve_error "--no-hicache: these configure" "${remote[@]}" --no-hicache
  expect_serve_error "--max-running-requests: these configure" "${remote[@]}" --max-running-requests 4
  expect_serve_error "--repeats, --no-warmup: these only apply with --compare" "${remote[@]}" --repeats 3 --no-warmup
  model="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
  expect_serve_error "--port, --api-key: these address a running server" --model "$model" --port 30000 --api-key k
  expect_serve_error "--compare needs --model" "${remote[@]}" --compare int8
  # Without stack flags, the remote mode reaches for the server (and finds none).
  rc=0
  timeout 60 "$HIQ" bench serve "${remote[@]}" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -ne 0 ]] || fail "hiq bench serve against a closed port succeeded"
  if grep -q "these configure\|only apply" "$TMP/err"; then fail "hiq bench serve refused plain remote flags: $(cat "$TMP/err")"; fi
  pass "hiq bench serve --port 9 without stack flags tries the server: $(head -c 200 "$TMP/err")"
fi

# `hiq bench cpu`: 2 threads against one on the committed small model, in the
# same run; the logits must be the same bits (the command fails otherwise).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$HIQ" bench cpu --model "$root/models/hiq-tiny-python" --threads 2 --prefill 64 --decode-context 64 --seconds 0.01 \
  --json >"$TMP/cpu.json" 2>"$TMP/err" || fail "hiq bench cpu exited non-zero: $(cat "$TMP/err")"
python3 - "$TMP/cpu.json" <<'PY' || fail "hiq bench cpu report: $(cat "$TMP/cpu.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["threads"] == 2, r
assert [row["what"] for row in r["rows"]] == ["prefill", "decode step", "decode batch of 8", "machine: multiply-adds",
                                            "machine: reading the matrices"], r
assert r["batch_same_as_alone"] is True, r
# The machine's ceilings are the last two rows' speedups, and every row is also given over the first.
assert r["machine_speedup"] == r["rows"][3]["speedup"] > 0, r
assert r["memory_speedup"] == r["rows"][4]["speedup"] > 0, r
for row in r["rows"]:
    assert abs(row["speedup_over_machine"] - row["speedup"] / r["machine_speedup"]) < 1e-9, row
    assert row["same_logits"] is True and row["one_thread_seconds"] > 0 and row["threads_seconds"] > 0, row
    # Rounds alternate one thread and two; the speedup is the median of their ratios.
    one, many = row["one_thread_rounds_seconds"], row["threads_rounds_seconds"]
    assert len(one) == len(many) and len(one) % 2 == 1, row
    assert row["one_thread_seconds"] == sorted(one)[len(one) // 2], row
    assert row["threads_seconds"] == sorted(many)[len(many) // 2], row
    ratios = sorted(a / b for a, b in zip(one, many))
    assert abs(row["speedup"] - ratios[len(ratios) // 2]) < 1e-9, row
PY
pass "hiq bench cpu --threads 2: same logits, speedup reported and over the machine's ceiling, a batch's logits are its sequences' alone"
# One thread against one: both rows timed and compared, not left empty.
"$HIQ" bench cpu --model "$root/models/hiq-tiny-python" --threads 1 --prefill 16 --decode-context 16 --decode-batch 2 --seconds 0.01 \
  --json >"$TMP/cpu1.json" 2>"$TMP/err" || fail "hiq bench cpu --threads 1 exited non-zero: $(cat "$TMP/err")"
python3 - "$TMP/cpu1.json" <<'PY' || fail "hiq bench cpu --threads 1 report: $(cat "$TMP/cpu1.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["threads"] == 1, r
for row in r["rows"]:
    assert row["same_logits"] is True and row["one_thread_seconds"] > 0 and row["threads_seconds"] > 0, row
PY
pass "hiq bench cpu --threads 1: the pass timed twice, same logits"
rc=0
"$HIQ" bench cpu --model "$root/models/hiq-tiny-python" --threads -1 >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] && grep -q -- "--threads must be positive" "$TMP/err" || fail "hiq bench cpu --threads -1: rc $rc, $(cat "$TMP/err")"
pass "hiq bench cpu --threads -1 is refused by name"

# `hiq bench model`: its flags are checked before the model is read or a GPU
# is looked for; --disable-cuda-graph is one of them (the GPU run is in
# scripts/gpu-check).
rc=0
"$HIQ" bench model --model "$root/tests/data/models/tiny-qwen3" --cuda-graph-max-bs 0 >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] && grep -qF -- "--cuda-graph-max-bs must be in [1, 1024], got 0" "$TMP/err" ||
  fail "hiq bench model --cuda-graph-max-bs 0: rc $rc, $(cat "$TMP/err")"
pass "hiq bench model --cuda-graph-max-bs 0 is refused by name"
rc=0
"$HIQ" bench model --model "$root/tests/data/models/tiny-qwen3" --disable-cuda-graph --prefill 0 >"$TMP/out" \
  2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] && grep -qF -- "--prefill" "$TMP/err" || fail "hiq bench model --disable-cuda-graph: rc $rc, $(cat "$TMP/err")"
pass "hiq bench model takes --disable-cuda-graph"

# `hiq bench demotion`: a small CPU run's JSON, and its refusals by name.
"$HIQ" bench demotion --tokens 256 --job-tokens 64 --threads 1,2 --repeats 1 --json >"$TMP/out" 2>"$TMP/err" ||
  fail "hiq bench demotion: $(cat "$TMP/err")"
python3 - "$TMP/out" <<'PY' || fail "hiq bench demotion --json: $(cat "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["from"] == "int8" and d["to"] == "int4h", d
assert [(r["device"], r["threads"]) for r in d["rows"]] == [("cpu", 1), ("cpu", 2)], d["rows"]
assert all(r["tokens_per_s"] > 0 and 0 < r["of_memcpy"] for r in d["rows"]), d["rows"]
PY
pass "hiq bench demotion --json: a row per thread count"
for case in "--device takes cpu and gpu, not 'tpu':--device tpu" \
            "--hicache-codec must be a ladder:--hicache-codec int8" \
            "--threads:--threads 0"; do
  want="${case%%:*}" flags="${case#*:}"
  rc=0
  # shellcheck disable=SC2086  # the flags are words
  "$HIQ" bench demotion --tokens 64 $flags >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] && grep -qF -- "$want" "$TMP/err" || fail "hiq bench demotion $flags: rc $rc, $(cat "$TMP/err")"
  pass "hiq bench demotion $flags → $want"
done

rc=0
"$HIQ" bench >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -ne 0 ]] || fail "hiq bench without a benchmark name succeeded"
pass "hiq bench alone asks for a benchmark"

echo "$checks checks passed"
