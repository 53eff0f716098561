#!/usr/bin/env bash
# Runtime modules are free of tools: the evaluation harness (src/eval) and the
# load generator (src/loadgen) serve tools/hiq and tests only. This fails when
#   - a runtime module (any src/ folder but eval and loadgen) includes eval/ or loadgen/;
#   - a runtime module holds an HTTP client (the mark of a load generator);
#   - a runtime module computes perplexity or KL divergence (the mark of an evaluation harness);
#   - a runtime library links hiq_eval or hiq_loadgen in src/CMakeLists.txt.
#
# Usage: tests/module_layering_test.sh [SOURCE_DIR]   (default: the repository of this script)
set -euo pipefail

ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
SRC="$ROOT/src"
[[ -d "$SRC" ]] || { echo "FAIL: $SRC is not a directory" >&2; exit 1; }
TOOL_MODULES=(eval loadgen)

failures=0
fail() { echo "FAIL $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok   $*"; }

runtime_files() {
  local excludes=()
  for m in "${TOOL_MODULES[@]}"; do excludes+=(--exclude-dir="$m"); done
  grep -rlE "$1" "${excludes[@]}" --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' "$SRC" || true
}

for m in "${TOOL_MODULES[@]}"; do
  [[ -d "$SRC/$m" ]] || fail "src/$m is missing (a tool module this check expects)"
  hits="$(runtime_files "#include \"$m/")"
  if [[ -n "$hits" ]]; then fail "runtime files include $m/: $hits"; else pass "no runtime module includes $m/"; fi
done

hits="$(runtime_files 'httplib::(Client|SSLClient)')"
if [[ -n "$hits" ]]; then fail "runtime files hold an HTTP client (a load generator belongs in src/loadgen): $hits"
else pass "no HTTP client in the runtime modules"; fi

hits="$(runtime_files '[Pp]erplexity|kl_divergence|KL\(')"
if [[ -n "$hits" ]]; then fail "runtime files compute perplexity or KL (an evaluation harness belongs in src/eval): $hits"
else pass "no evaluation harness in the runtime modules"; fi

# target_link_libraries(<target> ...) of a runtime target naming a tool library.
bad="$(awk '
  /^[[:space:]]*target_link_libraries\(/ { in_call = 1; target = $0; sub(/.*target_link_libraries\([[:space:]]*/, "", target); sub(/[[:space:]].*/, "", target); text = "" }
  in_call { text = text " " $0; if ($0 ~ /\)/) { in_call = 0; if (target != "hiq_eval" && target != "hiq_loadgen" && text ~ /hiq_(eval|loadgen)([[:space:])]|$)/) print target } }
' "$SRC/CMakeLists.txt")"
if [[ -n "$bad" ]]; then fail "runtime libraries link a tool module: $bad"; else pass "no runtime library links hiq_eval or hiq_loadgen"; fi

if (( failures > 0 )); then echo "$failures failure(s)" >&2; exit 1; fi
