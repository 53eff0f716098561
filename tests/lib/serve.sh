# tests/lib/serve.sh — sourced by the CLI tests that run `hiq serve`.
#
# serve_start LOG ARGS...: starts "$HIQ serve ARGS..." in the background with
# stderr to LOG, waits until it listens, and sets PID and PORT. Fails the test
# (exit 1, with the log) if the server exits or never listens (60 s).
serve_start() {
  local log=$1
  shift
  : >"$log"  # exists before the server's own redirection does, for the first read below
  "$HIQ" serve "$@" 2>>"$log" &
  PID=$!
  PORT=""
  for _ in $(seq 1 1200); do
    PORT=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" || true)
    [[ -n "$PORT" ]] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$log" >&2; echo "FAIL: hiq serve $* exited" >&2; exit 1; }
    sleep 0.05
  done
  cat "$log" >&2
  echo "FAIL: hiq serve $* did not start listening" >&2
  exit 1
}
