#!/usr/bin/env bash
# `hiq quality` run as a user would, on the tiny Qwen3 checkpoint and its
# bytes-only tokenizer: texts as strings and as token ids, the JSON report
# (bf16 exact, every codec restored its prefix from L2), and clear errors.
#
# Usage: HIQ=/path/to/hiq tests/cli_quality_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
MODEL="$(cd "$(dirname "$0")" && pwd)/data/models/tiny-qwen3"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_cli_quality_test.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

fail() {
  echo "FAIL $*" >&2
  exit 1
}

python3 - "$TMP/texts.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"text": "def quality(prefix, codec):\n    return restore(prefix, codec) " * 3}) + "\n")
    f.write("\n")
    f.write(json.dumps({"tokens": [rng.randrange(256) for _ in range(120)]}) + "\n")
PY
"$HIQ" quality --model "$MODEL" --texts "$TMP/texts.jsonl" --prefix-len 64 --continuation-len 32 --greedy-len 8 \
  --hicache-codec bf16,int8,int4h --json >"$TMP/report.json" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "hiq quality --json"; }
python3 - "$TMP/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["texts"] == 2 and [c["codec"] for c in r["codecs"]] == ["bf16", "int8", "int4h"], r
for c in r["codecs"]:
    assert c["valid"] and c["restored_tokens"] == 2 * 64 and c["heldout_positions"] == 2 * 32, c
bf16, int8, int4h = r["codecs"]
assert bf16["kl_max"] == 0 and bf16["top1_greedy"] == 1 and bf16["perplexity_change"] == 0, bf16
assert 0 < int8["kl_mean"] < int4h["kl_mean"], r
# Each text's score, a standard error over two texts, and every pair of tiers.
for c in r["codecs"]:
    assert [(s["text"], s["read"]) for s in c["scores"]] == [(0, 0), (1, 0)], c["scores"]
    assert c["perplexity_change_stderr"] is not None and c["perplexity_change_stderr"] >= 0, c
assert bf16["perplexity_change_stderr"] == 0 and all(s["nll_change"] == 0 for s in bf16["scores"]), bf16
pairs = {(p["a"], p["b"]): p for p in r["paired"]}
assert sorted(pairs) == [("bf16", "int4h"), ("bf16", "int8"), ("int8", "int4h")], pairs
p = pairs[("int8", "int4h")]
assert p["pairs"] == 2 and abs(p["difference"] - (int8["perplexity_change"] - int4h["perplexity_change"])) < 1e-12, p
print("ok   hiq quality --json: 2 texts, every codec restored 128 tokens; bf16 exact, int8 closer than int4h; "
      "per-text scores and paired differences")
PY
"$HIQ" quality --model "$MODEL" --random-texts 2 --prefix-len 32 --continuation-len 8 --greedy-len 4 >"$TMP/table" \
  || fail "hiq quality --random-texts"
grep -q "^int4h " "$TMP/table" || fail "the table has no int4h row: $(cat "$TMP/table")"
grep -qE "^  int8 − int4h: [+-][0-9.]+ points ± [0-9.]+ over 2 texts" "$TMP/table" \
  || fail "the table has no paired difference of int8 and int4h: $(cat "$TMP/table")"
echo "ok   hiq quality --random-texts: a table with every codec, and their paired differences"

expect_error() {  # expect_error MESSAGE ARGS...: hiq quality fails, saying MESSAGE
  local message="$1"
  shift
  if "$HIQ" quality --model "$MODEL" "$@" >/dev/null 2>"$TMP/err"; then fail "accepted: $*"; fi
  grep -qF -- "$message" "$TMP/err" || fail "for $*: expected '$message', got: $(cat "$TMP/err")"
  echo "ok   refused: $* ($message)"
}
expect_error "give one of --texts FILE and --random-texts N"
expect_error "cannot open" --texts "$TMP/missing.jsonl"
echo '{"text": 5}' >"$TMP/bad.jsonl"
expect_error "bad.jsonl:1: needs \"text\"" --texts "$TMP/bad.jsonl"
echo '{"tokens": [1, 99999]}' >"$TMP/bad.jsonl"
expect_error "outside the vocabulary" --texts "$TMP/bad.jsonl"
echo '{"tokens": [1, 2, 3]}' >"$TMP/bad.jsonl"
expect_error "are needed" --texts "$TMP/bad.jsonl" --prefix-len 8 --continuation-len 4
expect_error "unknown codec" --random-texts 1 --hicache-codec int3
expect_error "--lag needs an L2 budget" --random-texts 3 --lag 1
expect_error "--reads must be positive, and above 1 only with --lag" --random-texts 3 --reads 2
expect_error "each rung of a ladder must have fewer bits" --random-texts 1 --hicache-codec tiered:int4,int8

# The workload mode with a ladder: per-rung restores in the JSON.
"$HIQ" quality --model "$MODEL" --random-texts 5 --prefix-len 32 --continuation-len 8 --greedy-len 4 \
  --hicache-codec int8,tiered:int8,int4h --lag 1 --reads 2 --hicache-size 64KiB --json >"$TMP/workload.json" \
  2>"$TMP/err" || { cat "$TMP/err" >&2; fail "hiq quality --lag"; }
python3 - "$TMP/workload.json" <<'PY' || fail "the workload report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["lag"] == 1 and r["reads"] == 2, r
tiered = r["codecs"][1]
assert tiered["codec"] == "tiered:int8,int4h", tiered
assert len(tiered["restored_rung_tokens"]) == 2 and sum(tiered["restored_rung_tokens"]) == tiered["restored_tokens"], tiered
assert tiered["texts"] + tiered["missed_texts"] == 7, tiered  # 4 + 3 reads of 5 texts
PY
echo "ok   hiq quality --lag 1 --reads 2: restores per rung"
