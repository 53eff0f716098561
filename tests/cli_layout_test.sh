#!/usr/bin/env bash
# `hiq layout` run as a user would: figures that must come out exactly, and
# errors that must fail with a message that says what is wrong.
#
# Usage: HIQ=/path/to/hiq tests/cli_layout_test.sh
# Prints one line per check; exits non-zero at the first failure.
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
if [[ ! -x "$HIQ" ]]; then
  echo "FAIL: HIQ=$HIQ is not an executable file" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to read the JSON output" >&2; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_layout_test.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

checks=0
pass() { checks=$((checks + 1)); echo "ok   $*"; }
fail() {
  echo "FAIL $*" >&2
  exit 1
}

# Runs `hiq layout ARGS... --json` and stores the output in $TMP/out.json.
run_json() {
  if ! "$HIQ" layout "$@" --json >"$TMP/out.json" 2>"$TMP/err"; then
    fail "hiq layout $* --json exited non-zero: $(cat "$TMP/err")"
  fi
}

# expect_json LABEL EXPR EXPECTED: evaluates the Python expression EXPR over the
# last run_json output and compares it with the Python value EXPECTED. In EXPR,
# `rows` is the list of rows and `c` maps codec name -> row.
expect_json() {
  local label="$1" expr="$2" expected="$3" result
  if ! result="$(python3 - "$TMP/out.json" "$expr" "$expected" <<'PY'
import json, sys
path, expr, expected = sys.argv[1], sys.argv[2], sys.argv[3]
with open(path) as f:
    rows = json.load(f)
c = {r["codec"]: r for r in rows}
actual = eval(expr, {"rows": rows, "c": c, "round": round, "len": len})
want = eval(expected)
if actual != want or type(actual) is not type(want) and not (isinstance(actual, (int, float)) and isinstance(want, (int, float))):
    print(f"{expr} is {actual!r}, expected {want!r}")
    sys.exit(1)
print(f"{expr} == {want!r}")
PY
  )"; then
    fail "$label: $result"
  fi
  pass "$label: $result"
}

# expect_error LABEL NEEDLE ARGS...: `hiq layout ARGS...` must exit non-zero,
# print nothing on stdout and match NEEDLE (an extended regular expression,
# case-insensitively) on stderr.
expect_error() {
  local label="$1" needle="$2"
  shift 2
  if "$HIQ" layout "$@" >"$TMP/out" 2>"$TMP/err"; then
    fail "$label: hiq layout $* succeeded; expected an error mentioning '$needle'"
  fi
  if [[ -s "$TMP/out" ]]; then
    fail "$label: hiq layout $* printed on stdout despite failing: $(cat "$TMP/out")"
  fi
  if ! grep -qiE -- "$needle" "$TMP/err"; then
    fail "$label: stderr of hiq layout $* does not mention '$needle': $(cat "$TMP/err")"
  fi
  pass "$label: exits non-zero, stderr: $(head -n 1 "$TMP/err")"
}

# ---- qwen3-8b, 8 GB (decimal) ------------------------------------------------------
run_json --model qwen3-8b --hicache-size 8GB
expect_json "qwen3-8b codecs" '[r["codec"] for r in rows]' '["bf16", "int8", "fp8", "int4", "int4h"]'
expect_json "qwen3-8b geometry" '(c["bf16"]["num_layers"], c["bf16"]["num_kv_heads"], c["bf16"]["k_head_dim"])' '(36, 8, 128)'
expect_json "qwen3-8b budget" 'c["bf16"]["hicache_size_bytes"]' '8000000000'
expect_json "qwen3-8b L1 bytes/token" 'c["bf16"]["l1_bytes_per_token"]' '147456'
expect_json "qwen3-8b bf16 bytes/token" 'c["bf16"]["bytes_per_token"]' '147456'
expect_json "qwen3-8b bf16 bytes/row" 'c["bf16"]["bytes_per_row"]' '2048'
expect_json "qwen3-8b bf16 capacity" 'c["bf16"]["capacity_tokens"]' '54253'
expect_json "qwen3-8b bf16 ratio" 'c["bf16"]["ratio_vs_bf16"]' '1.0'
expect_json "qwen3-8b int8 bytes/token" 'c["int8"]["bytes_per_token"]' '74880'
expect_json "qwen3-8b int8 bytes/row" 'c["int8"]["bytes_per_row"]' '1040'
expect_json "qwen3-8b int8 bytes/row V" 'c["int8"]["bytes_per_row_v"]' '1040'
expect_json "qwen3-8b int8 payload/scales/padding" '(c["int8"]["payload_bytes"], c["int8"]["scale_bytes"], c["int8"]["padding_bytes"])' '(1024, 16, 0)'
expect_json "qwen3-8b int8 capacity" 'c["int8"]["capacity_tokens"]' '8000000000 // 74880'
expect_json "qwen3-8b int8 ratio" 'round(c["int8"]["ratio_vs_bf16"], 3)' '1.969'
expect_json "qwen3-8b fp8 = int8 size" 'c["fp8"]["bytes_per_token"]' '74880'
expect_json "qwen3-8b int4 bytes/token" 'c["int4"]["bytes_per_token"]' '41472'
expect_json "qwen3-8b int4 bytes/row" 'c["int4"]["bytes_per_row"]' '576'
expect_json "qwen3-8b int4h bytes/token" 'c["int4h"]["bytes_per_token"]' '41472'

# ---- SGLang's 1,152-byte INT8 record -----------------------------------------------
run_json --model qwen3-8b --hicache-size 8GB --record-align 128 --hicache-codec int8
expect_json "align 128 int8 only" '[r["codec"] for r in rows]' '["int8"]'
expect_json "align 128 int8 bytes/row" 'c["int8"]["bytes_per_row"]' '1152'
expect_json "align 128 int8 padding" 'c["int8"]["padding_bytes"]' '112'
expect_json "align 128 int8 bytes/token" 'c["int8"]["bytes_per_token"]' '82944'
expect_json "align 128 int8 ratio" 'round(c["int8"]["ratio_vs_bf16"], 4)' '1.7778'
expect_json "align 128 int8 memory reduction %" 'round(c["int8"]["memory_reduction"] * 100, 2)' '43.75'
expect_json "align 128 record_align echoed" 'c["int8"]["record_align"]' '128'

# ---- budgets ------------------------------------------------------------------------
run_json --model qwen3-8b --hicache-size 8GiB --hicache-codec bf16
expect_json "8GiB budget" 'c["bf16"]["hicache_size_bytes"]' '8 * 2**30'
expect_json "8GiB bf16 capacity" 'c["bf16"]["capacity_tokens"]' '58254'
expect_json "8GiB bf16 capacity = floor" 'c["bf16"]["capacity_tokens"]' '(8 * 2**30) // 147456'

run_json --model qwen3-8b --hicache-size 8 --hicache-codec bf16
expect_json "plain 8 is 8 GB" '(c["bf16"]["hicache_size_bytes"], c["bf16"]["capacity_tokens"])' '(8000000000, 54253)'

run_json --model qwen3-8b --hicache-size 8GB --hicache-codec bf16 --page-size 64
expect_json "page 64 capacity is whole pages" 'c["bf16"]["capacity_tokens"]' '(8000000000 // (147456 * 64)) * 64'

# ---- other models -------------------------------------------------------------------
run_json --model qwen3-32b --tp 4
expect_json "qwen3-32b tp 4 geometry" '(c["bf16"]["num_layers"], c["bf16"]["num_kv_heads"], c["bf16"]["tp"])' '(64, 2, 4)'
expect_json "qwen3-32b tp 4 bf16 bytes/token" 'c["bf16"]["bytes_per_token"]' '64 * 2 * 2 * 128 * 2'
expect_json "qwen3-32b tp 4 int8 bytes/row" 'c["int8"]["bytes_per_row"]' '272'  # 256 + 2 scales, padded to 16

run_json --model llama-3.1-8b
expect_json "llama-3.1-8b geometry" '(c["bf16"]["num_layers"], c["bf16"]["num_kv_heads"], c["bf16"]["k_head_dim"])' '(32, 8, 128)'
expect_json "llama-3.1-8b bf16 bytes/token" 'c["bf16"]["bytes_per_token"]' '131072'

# DeepSeek-V3's latent row is 576 wide, not a power of two: with the default
# codec list ("all") int4h is listed as unsupported; the rest must be exact.
run_json --model deepseek-v3
expect_json "deepseek-v3 lists int4h as unsupported" '(c["int4h"]["supported"], "power-of-two" in c["int4h"]["reason"])' '(False, True)'
run_json --model deepseek-v3 --hicache-codec bf16,int8,fp8,int4
expect_json "deepseek-v3 is MLA" '(c["bf16"]["attention"], c["bf16"]["num_layers"], c["bf16"]["num_kv_heads"], c["bf16"]["k_head_dim"], c["bf16"]["v_head_dim"])' '("mla", 61, 1, 576, 0)'
expect_json "deepseek-v3 no V row" '[r["bytes_per_row_v"] for r in rows]' '[None, None, None, None]'
expect_json "deepseek-v3 bf16 bytes/token" 'c["bf16"]["bytes_per_token"]' '70272'
expect_json "deepseek-v3 int8 bytes/token" 'c["int8"]["bytes_per_token"]' '61 * (576 + 2 + 14)'
expect_json "deepseek-v3 int4 bytes/row" 'c["int4"]["bytes_per_row"]' '288 + 18 * 2 + 12'

run_json --model deepseek-v3 --tp 8 --hicache-codec bf16
expect_json "deepseek-v3 tp 8 unchanged" '(c["bf16"]["tp"], c["bf16"]["num_kv_heads"], c["bf16"]["bytes_per_token"])' '(8, 1, 70272)'

# ---- a config.json on disk with head_dim 96 -----------------------------------------
mkdir -p "$TMP/hd96"
cat >"$TMP/hd96/config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 32,
 "num_key_value_heads": 8, "num_hidden_layers": 2}
JSON
run_json --model "$TMP/hd96/config.json" --hicache-codec int4
expect_json "head_dim 96 config file" '(c["int4"]["k_head_dim"], c["int4"]["num_layers"], c["int4"]["num_kv_heads"])' '(96, 2, 8)'
expect_json "head_dim 96 int4 bytes/row" 'c["int4"]["bytes_per_row"]' '8 * 96 // 2 + 8 * 3 * 2'
run_json --model "$TMP/hd96" --hicache-codec bf16
expect_json "head_dim 96 model directory" 'c["bf16"]["bytes_per_token"]' '2 * 2 * 8 * 96 * 2'
expect_error "int4h with head_dim 96" "power[- ]of[- ]two" --model "$TMP/hd96/config.json" --hicache-codec int4h
expect_error "int4h with head_dim 96 names it" "\\b96\\b" --model "$TMP/hd96" --hicache-codec int4h

# ---- the table ----------------------------------------------------------------------
if ! "$HIQ" layout --model qwen3-8b --hicache-size 8GB >"$TMP/table.txt" 2>"$TMP/err"; then
  fail "table: hiq layout exited non-zero: $(cat "$TMP/err")"
fi
grep -qF "54,253" "$TMP/table.txt" || fail "table: no '54,253' (bf16 capacity) in: $(cat "$TMP/table.txt")"
pass "table: bf16 capacity shown as 54,253"
grep -qF "147,456" "$TMP/table.txt" || fail "table: no '147,456' (bf16 bytes/token) in: $(cat "$TMP/table.txt")"
pass "table: bf16 bytes/token shown as 147,456"
for codec in bf16 int8 fp8 int4 int4h; do
  grep -qE "^$codec[[:space:]]" "$TMP/table.txt" || fail "table: no row for $codec in: $(cat "$TMP/table.txt")"
done
pass "table: one row per codec"

# ---- errors -------------------------------------------------------------------------
expect_error "unknown codec" "int3" --hicache-codec int3
expect_error "unknown codec in a list" "int3" --hicache-codec int8,int3
expect_error "bad size unit" "8XB" --hicache-size 8XB
expect_error "bad size names the flag" "--hicache-size" --hicache-size 8XB
expect_error "negative size" "negative" --hicache-size=-1GB
expect_error "record align not a power of two" "power[- ]of[- ]two" --record-align 100
expect_error "unknown model" "no-such-model" --model no-such-model
expect_error "unknown model lists presets" "qwen3-8b" --model no-such-model
expect_error "missing config file" "no such file" --model "$TMP/nowhere/config.json"
expect_error "tp 3 for 8 KV heads" "--tp" --model qwen3-32b --tp 3
expect_error "tp 0" "--tp" --tp 0
expect_error "page size 0" "--page-size" --page-size 0
expect_error "page size too large" "--page-size" --page-size 1073741824
expect_error "record align 0" "--record-align" --record-align 0
expect_error "record align -1 is reported as typed" "got -1" --record-align=-1
expect_error "host size 0" "--hicache-size" --hicache-size 0
expect_error "empty codec entry" "empty entry" --hicache-codec int8,
expect_error "codec named twice" "twice" --hicache-codec int8,int8
mkdir -p "$TMP/empty_dir" "$TMP/dir_as_config/config.json"
expect_error "directory without config.json" "without config.json" --model "$TMP/empty_dir"
expect_error "config.json that is a directory" "is a directory" --model "$TMP/dir_as_config"
printf '{"model_type": "qwen3",' >"$TMP/truncated.json"
expect_error "truncated JSON" "not valid JSON" --model "$TMP/truncated.json"
printf '[1, 2, 3]' >"$TMP/array.json"
expect_error "JSON that is not an object" "JSON object" --model "$TMP/array.json"
printf '12345678901234567890' >"$TMP/number.json"
expect_error "JSON that is a number" "JSON object" --model "$TMP/number.json"
if [[ -e /dev/zero ]]; then
  expect_error "a device file is not a config" "not a regular file" --model /dev/zero
fi
# A path that is not UTF-8 works, and in JSON mode is printed with replacement characters.
odd_dir="$TMP/$(printf 'model\xff')"
mkdir -p "$odd_dir" && cp "$TMP/hd96/config.json" "$odd_dir/config.json"
run_json --model "$odd_dir" --hicache-codec bf16
expect_json "non-UTF-8 model path in JSON" '(c["bf16"]["k_head_dim"], "\ufffd" in c["bf16"]["model"])' '(96, True)'
# A path that is not UTF-8 still gets a clean error, in JSON mode too.
expect_error "non-UTF-8 path" "no such file" --model "$TMP/$(printf 'c\xff')/config.json" --json

# Keys and values in codecs of their own: each part's record, summed per layer.
run_json --model qwen3-8b --hicache-codec int8,k=int8,v=int4h,v=bf16,k=int4h
expect_json "K/V codecs: bytes per token" '[(r["codec"], r["bytes_per_token"]) for r in rows]' \
  '[("int8", 74880), ("k=int8,v=int4h", 58176), ("k=int4h,v=bf16", 94464)]'
expect_json "K/V codecs: each part's row" '(c["k=int8,v=int4h"]["bytes_per_row"], c["k=int8,v=int4h"]["bytes_per_row_v"])' '(1040, 576)'
expect_error "K/V codecs: the same entry twice" "twice" --hicache-codec int8,k=int8,v=int8

# A ladder: one row per rung as its tier lays them out. An int8 token is
# padded to two int4h tokens' room, so 8 GB holds 96,450 int8 tokens (whole
# pages of the padded size) and exactly twice as many once all are int4h.
run_json --model qwen3-8b --hicache-size 8GB --hicache-codec tiered:int8,int4h
expect_json "ladder: rungs" '[(r["codec"], r["rung"], r["ladder"]) for r in rows]' \
  '[("int8", 0, "tiered:int8,int4h"), ("int4h", 1, "tiered:int8,int4h")]'
expect_json "ladder: records and tier bytes" '[(r["bytes_per_token"], r["tier_bytes_per_token"]) for r in rows]' \
  '[(74880, 82944), (41472, 41472)]'
expect_json "ladder: capacities" '[r["capacity_tokens"] for r in rows]' '[8000000000 // 82944, 2 * (8000000000 // 82944)]'
expect_json "ladder: ratios count the padding" 'round(c["int8"]["ratio_vs_bf16"], 4)' '1.7778'
run_json --model qwen3-8b --hicache-size 8GB --hicache-codec tiered:bf16,int8,int4h
expect_json "three rungs: tier bytes" '[r["tier_bytes_per_token"] for r in rows]' '[4 * 41472, 2 * 41472, 41472]'
expect_error "ladder upside down" "fewer bits" --hicache-codec tiered:int4h,int8
expect_error "ladder of one" "tiered" --hicache-codec tiered:int8
expect_error "ladder whose rungs the alignment pads alike" "free nothing" \
  --hicache-codec tiered:bf16,int8,int4h --record-align 2048

echo "all $checks checks passed"
