#!/usr/bin/env bash
# `hiq bench transfer` run as a user would: bad flags fail with a message that
# names the flag, before any GPU work; on a machine without a usable GPU the
# command says so and exits 1. (On a GPU machine, scripts/gpu-check runs it.)
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
fi

rc=0
"$HIQ" bench >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -ne 0 ]] || fail "hiq bench without a benchmark name succeeded"
pass "hiq bench alone asks for a benchmark"

echo "$checks checks passed"
