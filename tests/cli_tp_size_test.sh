#!/usr/bin/env bash
# --tp-size on `hiq serve` and `hiq bench serve --model` (the CPU backend's
# tensor parallelism): sizes below 1, sizes the model's heads do not divide,
# and tensor parallelism on CUDA (not built) are refused with exit code 1 and
# an error naming the flag or what it does not divide; a server split over 2
# ranks starts, says so, and answers; the in-process bench over 2 ranks runs
# its workload without a failed request and reports the size, also with a
# precision-tiered host tier that fills to its last rung. Run on the
# committed tiny checkpoint (4 query heads, 2 KV heads).
#
# Usage: HIQ=/path/to/hiq tests/cli_tp_size_test.sh
set -euo pipefail
: "${HIQ:?set HIQ to the path of the hiq binary}"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
MODEL="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
# shellcheck source=lib/serve.sh
source "$(dirname "$0")/lib/serve.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_tp_size_test.XXXXXX")"
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
  rm -rf -- "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL $*" >&2; exit 1; }

# Exit 77: ctest reports Skipped (SKIP_RETURN_CODE), not Passed.
if "$HIQ" serve --help 2>&1 | grep -q "not in this build"; then
  echo "SKIP: this hiq has no HTTP server (cpp-httplib missing at build time)" >&2
  exit 77
fi

serve=(serve --model "$MODEL" --port 0 --max-total-tokens 256)
bench=(bench serve --model "$MODEL" --max-total-tokens 256 --gsp-num-groups 1 --gsp-prompts-per-group 1
       --gsp-system-prompt-len 16 --gsp-question-len 4 --gsp-output-len 2)
for cmd in serve bench; do
  declare -n args="$cmd"
  name="${args[0]}"; [[ $cmd == bench ]] && name="bench serve"
  for case in "--tp-size must be in [1, 256], got 0:--tp-size 0" \
              "--tp-size must be in [1, 256], got -2:--tp-size -2" \
              "3 ranks do not divide the 4 query heads:--tp-size 3" \
              "8 ranks do not divide the 4 query heads:--tp-size 8" \
              "--tp-devices put ranks 0 and 1 on GPU 0, which NCCL refuses:--device cuda --tp-size 2 --tp-devices 0,0" \
              "--tp-devices list 3 GPUs for 2 ranks:--device cuda --tp-size 2 --tp-devices 0,1,2" \
              "collective must be nccl or peer, got 'mpi':--device cuda --tp-size 2 --tp-collective mpi"; do
    want="${case%%:*}" flags="${case#*:}"
    rc=0
    # shellcheck disable=SC2086  # the flags are words
    timeout 60 "$HIQ" "${args[@]}" $flags >"$TMP/out" 2>"$TMP/err" || rc=$?
    (( rc == 1 )) || fail "hiq $name $flags: exit code $rc, expected 1: $(cat "$TMP/err")"
    grep -q "^hiq $name: error: " "$TMP/err" || fail "hiq $name $flags: not a hiq error: $(cat "$TMP/err")"
    grep -qF -- "$want" "$TMP/err" || fail "hiq $name $flags: stderr lacks '$want': $(cat "$TMP/err")"
    echo "ok   hiq $name $flags: $(tail -n 1 "$TMP/err")"
  done
  unset -n args
done

# A server over 2 ranks: its log line says so, and it answers a token-id prompt.
serve_start "$TMP/log" --model "$MODEL" --port 0 --max-total-tokens 256 --tp-size 2
grep -q ", tp 2," "$TMP/log" || fail "hiq serve --tp-size 2: the log does not say tp 2: $(cat "$TMP/log")"
python3 - "$PORT" <<'PY' || fail "hiq serve --tp-size 2 did not answer"
import json, sys, urllib.request
body = {"prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 4, "temperature": 0, "ignore_eos": True}
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    out = json.load(r)
assert out["usage"]["completion_tokens"] == 4, out
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=60) as r:
    metrics = r.read().decode()
values = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
assert float(values["hiq:tp_size"]) == 2, metrics
PY
echo "ok   hiq serve --tp-size 2 answers, and /metrics says tp 2"
kill "$PID" && wait "$PID" || true
PID=""

# The in-process bench over 2 ranks.
"$HIQ" "${bench[@]}" --tp-size 2 --json >"$TMP/bench.json" 2>"$TMP/err" || fail "hiq bench serve --tp-size 2: $(cat "$TMP/err")"
python3 - "$TMP/bench.json" <<'PY' || fail "hiq bench serve --tp-size 2: $(cat "$TMP/bench.json")"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["server"]["tp_size"] == 2, out["server"]
assert out["failed"] == 0 and out["requests"] > 0, out
PY
echo "ok   hiq bench serve --tp-size 2 runs its workload"

# A precision-tiered host tier under 2 ranks: the workload's prompts (~900
# tokens) overflow L2's 256, so tokens reach the int4h rung (backed up there
# or demoted, which re-encodes every rank's records); nothing fails.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 128 --hicache-codec tiered:int8,int4h --hicache-tokens 256 \
  --gsp-num-groups 8 --gsp-prompts-per-group 4 --gsp-system-prompt-len 24 --gsp-question-len 4 --gsp-output-len 2 \
  --tp-size 2 --json >"$TMP/tiered.json" 2>"$TMP/err" || fail "hiq bench serve --tp-size 2 tiered: $(cat "$TMP/err")"
python3 - "$TMP/tiered.json" <<'PY' || fail "hiq bench serve --tp-size 2 tiered: $(cat "$TMP/tiered.json")"
import json, sys
out = json.load(open(sys.argv[1]))
s = out["server"]
assert out["failed"] == 0 and s["tp_size"] == 2, out
assert s["load_back_failures"] == 0, s
rung1 = s["rungs"][1]
assert rung1["codec"] == "int4h" and rung1["backup_tokens"] + rung1["demoted_tokens"] > 0, s["rungs"]
PY
echo "ok   hiq bench serve --tp-size 2 with a tiered host tier"
echo "PASS"
