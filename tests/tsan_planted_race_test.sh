#!/usr/bin/env bash
# tests/tsan.supp leaves our cpp-httplib handler code checked: runs
# hiq_tsan_planted_race (tests/tsan_planted_race_test.cc) under ThreadSanitizer
# with the suppressions the server tests use. For the modes handler and stream
# it passes only when TSan reports the planted race in the function named for
# the mode; for clean, only when TSan reports nothing.
#
# Usage: tests/tsan_planted_race_test.sh PATH/TO/hiq_tsan_planted_race handler|stream|clean
set -euo pipefail

BIN="$1" MODE="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_tsan_planted.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}:suppressions=$HERE/tsan.supp"

rc=0
"$BIN" "$MODE" >"$TMP/out" 2>"$TMP/err" || rc=$?
reports=$(grep -c "WARNING: ThreadSanitizer:" "$TMP/err" || true)
case "$MODE" in
  handler|stream)
    want="planted_write_in_$MODE"
    if (( reports == 0 )) || ! grep -q "$want" "$TMP/err" || ! grep -q "planted_write_in_test_thread" "$TMP/err"; then
      cat "$TMP/out" "$TMP/err" >&2
      echo "FAIL: no TSan report of the race planted in $want (exit $rc): tests/tsan.supp hides our handler code" >&2
      exit 1
    fi
    echo "ok   TSan reports the race planted in $want, through tests/tsan.supp"
    grep -A 6 "WARNING: ThreadSanitizer: data race" "$TMP/err" | head -n 14
    ;;
  clean)
    if (( reports > 0 || rc != 0 )); then
      cat "$TMP/out" "$TMP/err" >&2
      echo "FAIL: the synchronised server: exit $rc, $reports TSan report(s) (expected none)" >&2
      exit 1
    fi
    echo "ok   the synchronised server: no TSan report"
    ;;
  *) echo "FAIL: unknown mode '$MODE'" >&2; exit 1 ;;
esac
