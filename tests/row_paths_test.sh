#!/usr/bin/env bash
# The GPU row codec keeps one kernel path per file: for each RowPath of
# src/codec/cuda/row_common.cuh a row_<path>.cuh holds that path's encoders and
# decoders, and row_codec.cuh only dispatches (it defines encode_row and
# decode_row and no other device function). Fails when paths pile up again.
#
# Usage: tests/row_paths_test.sh [SOURCE_DIR]
set -euo pipefail

ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
DIR="$ROOT/src/codec/cuda"
failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }

[[ -f "$DIR/row_common.cuh" ]] || { echo "FAIL $DIR/row_common.cuh is missing" >&2; exit 1; }
paths="$(sed -n '/enum class RowPath/,/};/p' "$DIR/row_common.cuh" | grep -oE '^\s*k[A-Z][A-Za-z]*' | tr -d ' ')"
[[ -n "$paths" ]] || fail "no RowPath enumerators found in row_common.cuh"
for p in $paths; do
  name="$(echo "${p#k}" | tr '[:upper:]' '[:lower:]')"
  file="$DIR/row_$name.cuh"
  if [[ ! -f "$file" ]]; then fail "RowPath::$p has no file row_$name.cuh"; continue; fi
  grep -q "RowPath::$p" "$file" || fail "row_$name.cuh does not say it is RowPath::$p"
  for other in $paths; do
    [[ "$other" == "$p" ]] && continue
    other_file="row_$(echo "${other#k}" | tr '[:upper:]' '[:lower:]').cuh"
    ! grep -q "#include \"codec/cuda/$other_file\"" "$file" || fail "row_$name.cuh includes another path, $other_file"
  done
  echo "ok   RowPath::$p in row_$name.cuh"
done

extra="$(grep -oE '__device__ [a-z_0-9 ]*\b[a-z_0-9]+\(' "$DIR/row_codec.cuh" | grep -vE '\b(encode_row|decode_row)\($' || true)"
if [[ -n "$extra" ]]; then fail "row_codec.cuh defines device functions besides the dispatch: $extra"
else echo "ok   row_codec.cuh only dispatches (encode_row, decode_row)"; fi

if (( failures > 0 )); then exit 1; fi
