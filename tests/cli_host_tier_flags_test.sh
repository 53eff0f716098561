#!/usr/bin/env bash
# The host-tier budget flags that `hiq sim`, `hiq serve` and `hiq bench
# serve` share (tools/hiq/host_tier_flags.h): --hicache-size, when set, sizes
# the tier and --hicache-size 0 hands it to --hicache-ratio, as in SGLang; a
# typed --hicache-ratio is never dropped in silence (a non-zero --hicache-size
# or --hicache-tokens with it is refused, naming both, before any model is
# loaded); and each command's default budget applies only when neither is
# typed; --hicache-demotion-device (serve, bench serve) takes auto, cpu or
# gpu, gpu only with --device cuda. Run on the committed tiny checkpoint;
# `hiq sim` also has its own checks in cli_sim_test.sh.
#
# Usage: HIQ=/path/to/hiq tests/cli_host_tier_flags_test.sh
set -euo pipefail
: "${HIQ:?set HIQ to the path of the hiq binary}"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
MODEL="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
# shellcheck source=lib/serve.sh
source "$(dirname "$0")/lib/serve.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_host_tier_flags_test.XXXXXX")"
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

# Each command refuses the same conflicting flags with exit code 1 and its own
# error naming both flags.
sim=(sim --model qwen3-0.6b --max-total-tokens 256 --gsp-num-groups 1 --gsp-prompts-per-group 1)
serve=(serve --model "$MODEL" --port 0 --max-total-tokens 256)
bench=(bench serve --model "$MODEL" --max-total-tokens 256 --gsp-num-groups 1 --gsp-prompts-per-group 1)
for cmd in sim serve bench; do
  declare -n args="$cmd"
  name="${args[0]}"; [[ $cmd == bench ]] && name="bench serve"
  for case in "--hicache-size 1GB and --hicache-ratio 4 both size the host tier:--hicache-size 1GB --hicache-ratio 4" \
              "--hicache-tokens 512 and --hicache-ratio 3 both size the host tier:--hicache-tokens 512 --hicache-ratio 3" \
              "--hicache-ratio must be a positive number:--hicache-ratio 0" \
              "--hicache-demotion-threads must be from 1 to 256:--hicache-demotion-threads 0" \
              "--hicache-demotion-watermark must be a fraction from 0 to 0.5 (got 0.75):--hicache-demotion-watermark 0.75" \
              "--hicache-demotion-watermark must be a fraction from 0 to 0.5 (got -0.1):--hicache-demotion-watermark -0.1" \
              "--hicache-demotion-watermark must be a fraction from 0 to 0.5 (got nan):--hicache-demotion-watermark nan" \
              "each rung of a ladder must have fewer bits per value:--hicache-codec tiered:int4h,int8"; do
    want="${case%%:*}" flags="${case#*:}"
    rc=0
    # shellcheck disable=SC2086  # the flags are words
    timeout 60 "$HIQ" "${args[@]}" $flags >"$TMP/out" 2>"$TMP/err" || rc=$?
    (( rc == 1 )) || fail "hiq $name $flags: exit code $rc, expected 1: $(cat "$TMP/err")"
    grep -q "^hiq $name: error: " "$TMP/err" || fail "hiq $name $flags: not a hiq error: $(cat "$TMP/err")"
    grep -qF -- "$want" "$TMP/err" || fail "hiq $name $flags: stderr lacks '$want': $(cat "$TMP/err")"
    echo "ok   hiq $name $flags: $(cat "$TMP/err")"
  done
  unset -n args
done

# hiq serve: the L2 it starts with, from its log line ("L2 N tokens").
serve_l2_tokens() {
  serve_start "$TMP/log" --model "$MODEL" --port 0 --max-total-tokens 256 "$@" >&2
  kill "$PID" && wait "$PID" || true
  PID=""
  sed -n 's|.*, L2 \([0-9]*\) tokens.*|\1|p' "$TMP/log"
}
# hiq bench serve --model: the L2 of its in-process server, from --json.
bench_l2_tokens() {
  "$HIQ" bench serve --model "$MODEL" --max-total-tokens 256 --gsp-num-groups 1 --gsp-prompts-per-group 1 \
    --gsp-system-prompt-len 16 --gsp-question-len 4 --gsp-output-len 2 "$@" --json >"$TMP/bench.json" 2>"$TMP/err" \
    || fail "hiq bench serve $*: $(cat "$TMP/err")"
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["server"]["l2_capacity_tokens"])' "$TMP/bench.json"
}
# L1 is 256 tokens; serve's default is SGLang's ratio of 2.
for case in "512:" "1024:--hicache-ratio 4" "768:--hicache-size 0 --hicache-ratio 3" "384:--hicache-tokens 384 --hicache-size 1GB"; do
  want="${case%%:*}" flags="${case#*:}"
  for cmd in serve bench; do
    # shellcheck disable=SC2086  # the flags are words
    got="$("${cmd}_l2_tokens" $flags)"
    [[ $got == "$want" ]] || fail "hiq $cmd ${flags:-(no budget flag)}: L2 $got tokens, expected $want"
    echo "ok   hiq $cmd ${flags:-(no budget flag)}: L2 $got tokens"
  done
done
# Where a ladder demotes: serve and bench serve only (sim has no device to
# choose); gpu needs --device cuda, and a bad name is refused, naming the flag.
for cmd in serve bench; do
  declare -n args="$cmd"
  name="${args[0]}"; [[ $cmd == bench ]] && name="bench serve"
  for case in "--hicache-demotion-device must be auto, cpu or gpu, not 'tpu':--hicache-demotion-device tpu" \
              "--hicache-demotion-device gpu demotes on the serving GPU, so it needs device cuda:--hicache-demotion-device gpu"; do
    want="${case%%:*}" flags="${case#*:}"
    rc=0
    # shellcheck disable=SC2086  # the flags are words
    timeout 60 "$HIQ" "${args[@]}" --hicache-codec tiered:int8,int4h $flags >"$TMP/out" 2>"$TMP/err" || rc=$?
    (( rc == 1 )) || fail "hiq $name $flags: exit code $rc, expected 1: $(cat "$TMP/err")"
    grep -qF -- "$want" "$TMP/err" || fail "hiq $name $flags: stderr lacks '$want': $(cat "$TMP/err")"
    echo "ok   hiq $name $flags: $(cat "$TMP/err")"
  done
  unset -n args
done
# On the CPU a ladder demotes on host threads, and bench serve's JSON says so.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 256 --hicache-codec tiered:int8,int4h --gsp-num-groups 1 \
  --gsp-prompts-per-group 1 --gsp-system-prompt-len 16 --gsp-question-len 4 --gsp-output-len 2 --json \
  >"$TMP/bench.json" 2>"$TMP/err" || fail "hiq bench serve with a ladder: $(cat "$TMP/err")"
device="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["server"]["demotion"]["device"])' "$TMP/bench.json")"
[[ $device == cpu ]] || fail "hiq bench serve with a ladder on the CPU: demotion device '$device', expected cpu"
echo "ok   hiq bench serve --hicache-codec tiered:int8,int4h: demotes on the $device"
# Without a ladder the flag has nothing to do, and the server says so.
"$HIQ" bench serve --model "$MODEL" --max-total-tokens 256 --hicache-demotion-device cpu --gsp-num-groups 1 \
  --gsp-prompts-per-group 1 --gsp-system-prompt-len 16 --gsp-question-len 4 --gsp-output-len 2 \
  >"$TMP/out" 2>"$TMP/err" || fail "hiq bench serve --hicache-demotion-device cpu: $(cat "$TMP/err")"
grep -qF -- "--hicache-demotion-device cpu has nothing to do" "$TMP/err" ||
  fail "hiq bench serve --hicache-demotion-device cpu without a ladder: no warning: $(cat "$TMP/err")"
echo "ok   hiq bench serve --hicache-demotion-device cpu without a ladder warns"
echo "all host-tier flag checks passed"
