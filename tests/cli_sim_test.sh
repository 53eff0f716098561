#!/usr/bin/env bash
# `hiq sim` run as a user would, at a reduced size: the JSON report has the
# documented keys and sane values, the host tier helps, and bad flags fail with
# a message naming them.
#
# Usage: HIQ=/path/to/hiq tests/cli_sim_test.sh
set -euo pipefail
: "${HIQ:?set HIQ to the path of the hiq binary}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_sim_test.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT
fail() { echo "FAIL $*" >&2; exit 1; }

small=(--model qwen3-0.6b --max-total-tokens 1024 --gsp-num-groups 8 --gsp-prompts-per-group 4
       --gsp-system-prompt-len 256 --gsp-question-len 16 --gsp-output-len 4 --max-concurrency 4)

for mode in int8 bf16 none; do
  extra=(--hicache-codec "$mode" --hicache-size 0.5GB)
  [[ $mode == none ]] && extra=(--no-hicache)
  "$HIQ" sim "${small[@]}" "${extra[@]}" --json >"$TMP/$mode.json" 2>"$TMP/$mode.err" \
    || fail "hiq sim ($mode) exited non-zero: $(cat "$TMP/$mode.err")"
done

python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
r = {m: json.load(open(f"{tmp}/{m}.json")) for m in ("int8", "bf16", "none")}
keys = ["device", "hit_rate", "hit_rate_device", "hit_rate_host", "l2_capacity_tokens", "l2_bytes_per_token",
        "restored_tokens", "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99", "itl_ms_max",
        "wall_seconds"]
for m, d in r.items():
    missing = [k for k in keys if k not in d]
    assert not missing, f"{m}: missing keys {missing}"
    assert d["device"] == "cpu", (m, d["device"])
    assert d["requests"] == 32 and d["rejected"] == 0, (m, d["requests"], d["rejected"])
    assert abs(d["hit_rate"] - d["hit_rate_device"] - d["hit_rate_host"]) < 1e-9, m
    assert 0 <= d["ttft_ms_p50"] <= d["ttft_ms_p99"], m
    assert 0 < d["itl_ms_p50"] <= d["itl_ms_p99"] <= d["itl_ms_max"], m
assert r["none"]["hit_rate_host"] == 0 and r["none"]["l2_capacity_tokens"] == 0
assert r["bf16"]["hit_rate"] > r["none"]["hit_rate"], "the host tier must raise the hit rate"
assert r["int8"]["hit_rate"] >= r["bf16"]["hit_rate"]
assert r["int8"]["l2_bytes_per_token"] == 28 * 2 * (8 * 128 + 16), r["int8"]["l2_bytes_per_token"]
assert r["bf16"]["l2_bytes_per_token"] == 28 * 2 * 8 * 128 * 2
print("ok   sim reports:", {m: round(d["hit_rate"], 3) for m, d in r.items()})
PY

# LPM (the default) serves the same requests as FCFS with the same L1 hit
# rate or better, and the report says which policy ran.
"$HIQ" sim "${small[@]}" --hicache-codec int8 --hicache-size 0.5GB --schedule-policy fcfs --json >"$TMP/fcfs.json" \
  2>"$TMP/fcfs.err" || fail "hiq sim --schedule-policy fcfs exited non-zero: $(cat "$TMP/fcfs.err")"
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
fcfs, lpm = (json.load(open(f"{tmp}/{m}.json")) for m in ("fcfs", "int8"))
assert fcfs["schedule_policy"] == "fcfs" and lpm["schedule_policy"] == "lpm", (fcfs["schedule_policy"], lpm["schedule_policy"])
assert lpm["requests"] == 32 and lpm["rejected"] == 0, lpm
assert lpm["hit_rate_device"] >= fcfs["hit_rate_device"], (lpm["hit_rate_device"], fcfs["hit_rate_device"])
print("ok   lpm: L1 hit rate", round(lpm["hit_rate_device"], 3), "vs fcfs", round(fcfs["hit_rate_device"], 3))
PY

"$HIQ" sim --model qwen3-0.6b --max-total-tokens 1024 --dataset-name multi-turn --num-clients 6 --num-rounds 3 \
  --request-length 64 --output-length 8 --hicache-size 0.5GB --json >"$TMP/mt.json" 2>"$TMP/mt.err" \
  || fail "multi-turn sim exited non-zero: $(cat "$TMP/mt.err")"
python3 -c "
import json, sys
d = json.load(open('$TMP/mt.json'))
assert d['requests'] == 18 and d['rejected'] == 0, d
assert d['hit_rate'] > 0.4, d['hit_rate']
print('ok   multi-turn hit rate', round(d['hit_rate'], 3))
"

base=(--model qwen3-0.6b --max-total-tokens 1024 --gsp-system-prompt-len 64 --gsp-question-len 8 --gsp-output-len 2)
expect_error() {  # expect_error NEEDLE ARGS...: our own validation, not the flag parser's
  local needle="$1"; shift
  if "$HIQ" sim "${base[@]}" "$@" >"$TMP/out" 2>"$TMP/err"; then fail "hiq sim $* succeeded"; fi
  grep -q "^hiq sim: error: " "$TMP/err" || fail "hiq sim $*: not a hiq error: $(cat "$TMP/err")"
  grep -qiE -- "$needle" "$TMP/err" || fail "hiq sim $*: stderr lacks '$needle': $(cat "$TMP/err")"
  echo "ok   error: $(cat "$TMP/err")"
}
expect_error "--hicache-write-policy" --hicache-write-policy write_around
expect_error "int3" --hicache-codec int3
expect_error "--dataset-name" --dataset-name sharegpt
expect_error "--num-rounds" --dataset-name multi-turn --num-rounds 0
expect_error "--max-concurrency" --max-concurrency 0
expect_error "--schedule-policy 'dfs-weight' is not one of fcfs, lpm" --schedule-policy dfs-weight
expect_error "--schedule-max-overtakes" --schedule-max-overtakes -1
expect_error "--max-running-requests" --max-running-requests 0
expect_error "--chunked-prefill-size must be positive, or -1 or 0" --chunked-prefill-size -5
expect_error "--gsp-num-groups" --gsp-num-groups 0
expect_error "--hicache-ratio must be a positive" --hicache-size 0 --hicache-ratio 0
expect_error "--client-delay-ms must be zero or more" --client-delay-ms -1
expect_error "--step-cost must be constant or batch, got 'linear'" --step-cost linear
# Two flags that would each size the host tier are refused by name, never one
# of them dropped (the budget flags are shared with serve and bench serve:
# tests/cli_host_tier_flags_test.sh).
expect_error "--hicache-size 1GB and --hicache-ratio 4 both size the host tier" --hicache-size 1GB --hicache-ratio 4
expect_error "--hicache-tokens 4096 and --hicache-ratio 4 both size the host tier" --hicache-tokens 4096 --hicache-ratio 4

# The host budget: --hicache-ratio alone sizes the tier (the 8 GB default
# applies only when neither --hicache-size nor --hicache-ratio is typed: it
# used to override a typed ratio in silence), --hicache-size 0 sizes it by
# SGLang's default ratio of 2, and --hicache-tokens overrides --hicache-size.
l2_tokens() {  # l2_tokens ARGS...: the L2 capacity hiq sim reports
  "$HIQ" sim "${base[@]}" --gsp-num-groups 1 --gsp-prompts-per-group 1 "$@" --json 2>"$TMP/err" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["l2_capacity_tokens"])' \
    || fail "hiq sim $*: $(cat "$TMP/err")"
}
for case in "4096:--hicache-ratio 4" "2048:--hicache-size 0" "1536:--hicache-size 0 --hicache-ratio 1.5" \
            "3000:--hicache-tokens 3000 --hicache-size 1GB"; do
  want="${case%%:*}" flags="${case#*:}"
  # shellcheck disable=SC2086  # the flags are words
  got="$(l2_tokens $flags)"
  [[ $got == "$want" ]] || fail "hiq sim $flags: L2 capacity $got tokens, expected $want (L1 1024)"
  echo "ok   $flags: L2 $got tokens"
done
"$HIQ" sim --help | grep -q -- "--hicache-size.*default: 8GB" || fail "hiq sim --help: the 8GB default is not shown"
expect_error "--device 'bogus' is not one of cpu, cuda" --device bogus

# --device cuda needs the CUDA backend and a GPU. With both, it serves the
# workload exactly as the CPU backend did above; without, it fails with exit
# code 1 and the reason: the CUDA runtime's where the backend is built (CI
# compiles it on a machine without a GPU), ours where it is not.
gpus="$("$HIQ" devices --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["devices"]))')"
if (( gpus > 0 )); then
  "$HIQ" sim "${small[@]}" --hicache-codec int8 --hicache-size 0.5GB --device cuda --json >"$TMP/cuda.json" \
    2>"$TMP/cuda.err" || fail "hiq sim --device cuda exited non-zero on a machine with $gpus GPU(s): $(cat "$TMP/cuda.err")"
  python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
cpu, gpu = (json.load(open(f"{tmp}/{m}.json")) for m in ("int8", "cuda"))
assert gpu["device"] == "cuda", gpu["device"]
differ = {k: (cpu[k], gpu[k]) for k in cpu if k not in ("device", "wall_seconds") and cpu[k] != gpu.get(k)}
assert not differ, f"--device cuda differs from cpu: {differ}"
print("ok   --device cuda gives the CPU report, hit rate", round(gpu["hit_rate"], 3))
PY
else
  rc=0
  "$HIQ" sim "${base[@]}" --device cuda >"$TMP/out" 2>"$TMP/err" || rc=$?
  (( rc == 1 )) || fail "hiq sim --device cuda without a GPU: exit code $rc, expected 1: $(cat "$TMP/err")"
  grep -q "^hiq sim: error: --device cuda: " "$TMP/err" || fail "--device cuda: not a hiq error: $(cat "$TMP/err")"
  grep -qE "no usable CUDA device|this build has no CUDA backend" "$TMP/err" \
    || fail "--device cuda: stderr lacks the reason: $(cat "$TMP/err")"
  echo "ok   no GPU: $(cat "$TMP/err")"
fi
echo "all sim checks passed"
