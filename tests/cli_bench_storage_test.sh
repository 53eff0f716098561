#!/usr/bin/env bash
# `hiq bench storage` run as a user would, on a tiny geometry: bad flags fail
# with a message naming the flag; a run over file, memory and (when
# redis-server is installed) a private Redis prints every figure positive and
# consistent, leaves nothing in --dir and no redis-server behind; without
# redis-server on PATH, redis is skipped with a line saying so.
#
# Usage: HIQ=/path/to/hiq tests/cli_bench_storage_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="$ROOT/models/hiq-tiny-python"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_bench_storage_test.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*" >&2
  exit 1
}

# expect_error "substring" ARGS...: `hiq bench storage ARGS` exits 1, says the substring on stderr, prints nothing.
expect_error() {
  local want="$1"; shift
  local rc=0
  timeout 30 "$HIQ" bench storage "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] || fail "hiq bench storage $* exited $rc, expected 1: $(cat "$TMP/err")"
  grep -qF -- "$want" "$TMP/err" || fail "hiq bench storage $*: stderr lacks '$want': $(cat "$TMP/err")"
  [[ ! -s "$TMP/out" ]] || fail "hiq bench storage $*: printed on stdout: $(cat "$TMP/out")"
  pass "hiq bench storage $* → $want"
}

expect_error "--values must be in" --values -1
expect_error "--batch must be in" --batch 0
expect_error "--repeats must be in" --repeats 0
expect_error "--block-tokens must be in" --block-tokens 0
expect_error "--backends: 'none' is not a backend" --backends file,none
expect_error "--backends: 'file' is given twice" --backends file,file
expect_error "--backends: storage backend 'disk'" --backends disk
expect_error "unknown codec 'int3'" --hicache-codec int8,int3
expect_error "--record-align" --record-align 3
expect_error "--redis-port 0 is outside" --backends redis --redis-port 0
expect_error "unknown model" --model no-such-model
# A named Redis that is not there is an error, not a skip.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
expect_error "redis 127.0.0.1:$port" --backends redis --redis-port "$port" --values 1

# json_check FILE BACKENDS...: every row's figures positive and consistent, one row per codec and backend.
json_check() {
  python3 - "$@" <<'EOF'
import json, sys
path, backends = sys.argv[1], sys.argv[2:]
out = json.load(open(path))
rows = out["rows"]
codecs = ["bf16", "int8", "int4h"]
got = sorted((r["backend"], r["codec"]) for r in rows)
want = sorted((b, c) for b in backends for c in codecs)
assert got == want, f"rows {got}, expected {want}"
for r in rows:
    what = f'{r["backend"]} {r["codec"]}'
    for k in ["write_s", "read_s", "raw_write_s", "raw_read_s", "encode_s", "decode_s", "write_gbps", "read_gbps",
              "raw_write_gbps", "raw_read_gbps", "write_vs_raw", "read_vs_raw", "tokens_per_s", "bytes_per_token"]:
        assert r[k] > 0, f"{what}: {k} = {r[k]}"
    assert r["values"] == 8, f"{what}: values {r['values']}"
    assert r["payload_bytes"] == 16 * r["bytes_per_token"], what
    assert r["value_bytes"] == r["payload_bytes"] + 64, what
    assert r["total_bytes"] == 8 * r["value_bytes"], what
    assert abs(r["tokens_per_s"] - 8 * 16 / r["read_s"]) < 1e-6 * r["tokens_per_s"], what
    assert r["reference"], what
for k in ["model", "block_tokens", "batch", "repeats", "memory_bytes", "largest_file_bytes"]:
    assert out[k], k
assert out["file_reads_from_page_cache"] is True
if "redis" in backends:
    assert out["redis"]["version"] and out["redis"]["private"] is True, out["redis"]
    print(out["redis"]["endpoint"].split(":")[1])
EOF
}

tiny=(--model "$MODEL" --block-tokens 16 --values 8 --batch 3 --repeats 1 --dir "$TMP/l3")
if command -v redis-server >/dev/null; then
  backends=(file memory redis)
else
  backends=(file memory)
  echo "note: redis-server is not installed; redis is tested only as skipped"
fi
list="$(IFS=,; echo "${backends[*]}")"
"$HIQ" bench storage "${tiny[@]}" --backends "$list" --json >"$TMP/run.json" 2>"$TMP/err" ||
  fail "tiny run failed: $(cat "$TMP/err")"
redis_port="$(json_check "$TMP/run.json" "${backends[@]}")" || fail "bad JSON: $(cat "$TMP/run.json")"
pass "tiny run over $list: every figure positive, sizes consistent"
[[ -d "$TMP/l3" && -z "$(ls -A "$TMP/l3")" ]] || fail "--dir is not left empty: $(ls -RA "$TMP/l3")"
pass "nothing left in --dir"
grep -q "hiq bench storage: int8 file: read 1/1" "$TMP/err" || fail "no progress on stderr: $(cat "$TMP/err")"
pass "progress on stderr"
if [[ -n "$redis_port" ]]; then
  if (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null; then
    fail "the private redis-server still listens on $redis_port"
  fi
  pass "the private redis-server on port $redis_port is gone"
fi

# The table: the reference and the page cache said in words.
"$HIQ" bench storage "${tiny[@]}" --backends file >"$TMP/table" 2>"$TMP/err" || fail "table run: $(cat "$TMP/err")"
for want in "write GB/s" "vs raw" "tokens/s fetched" "page cache" "file reference: POSIX"; do
  grep -qF "$want" "$TMP/table" || fail "the table lacks '$want': $(cat "$TMP/table")"
done
pass "table names the reference and the page cache"

# No redis-server on PATH and no --redis-host: redis is skipped, saying so; alone, nothing is measured.
env PATH=/nonexistent "$HIQ" bench storage "${tiny[@]}" --backends file,redis --json >"$TMP/skip.json" \
  2>"$TMP/err" || fail "skip run failed: $(cat "$TMP/err")"
grep -qF "skipping redis: no --redis-host or --redis-port given and no redis-server on PATH" "$TMP/err" ||
  fail "no skip line: $(cat "$TMP/err")"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["skipped"][0]["backend"]=="redis"; assert {r["backend"] for r in o["rows"]}=={"file"}' \
  "$TMP/skip.json" || fail "skip JSON: $(cat "$TMP/skip.json")"
pass "without redis-server: redis skipped with a line, file measured"
rc=0
env PATH=/nonexistent "$HIQ" bench storage "${tiny[@]}" --backends redis >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -eq 1 ]] && grep -qF "nothing to measure" "$TMP/err" || fail "redis alone, skipped: rc $rc, $(cat "$TMP/err")"
pass "redis alone without a server: nothing to measure, exit 1"
