#!/usr/bin/env bash
# The GPU tests on a machine without a usable GPU (CI builds them when nvcc is
# found): every one of them skips, and with HIQ_REQUIRE_GPU=1 (what
# scripts/gpu-check sets) every one fails instead, so a GPU run cannot report
# "ok" with nothing run. With a driver that is installed but fails (the fake
# libcuda.so.1 of tests/fake_broken_cuda_driver.cc), every one fails even
# without HIQ_REQUIRE_GPU: a broken GPU machine is not a machine without a GPU.
# Where a GPU is usable there is nothing to check here (scripts/gpu-check runs
# the tests for real): exit 77, Skipped.
#
# Usage: tests/gpu_skip_policy_test.sh PATH/TO/hiq_gpu_tests DIR/OF/FAKE/libcuda.so.1
set -euo pipefail

GPU_TESTS="$1" FAKE_DRIVER_DIR="$2"
[[ -f "$FAKE_DRIVER_DIR/libcuda.so.1" ]] || { echo "FAIL: no $FAKE_DRIVER_DIR/libcuda.so.1" >&2; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hiq_gpu_skip_policy.XXXXXX")"
trap 'rm -rf -- "$TMP"' EXIT

# run NAME [ENV...]: runs the GPU tests with the environment given (and without
# the caller's HIQ_REQUIRE_GPU), leaving a JSON report in $TMP/NAME.json.
run() {
  local name=$1; shift
  env -u HIQ_REQUIRE_GPU "$@" "$GPU_TESTS" --gtest_output="json:$TMP/$name.json" >"$TMP/$name.log" 2>&1 || true
  [[ -s "$TMP/$name.json" ]] || { tail -n 20 "$TMP/$name.log" >&2; echo "FAIL: $name: no gtest report" >&2; exit 1; }
}

# counts NAME: "tests ran skipped failed" from the report.
counts() {
  python3 - "$TMP/$1.json" <<'PY'
import json, sys
cases = [c for s in json.load(open(sys.argv[1]))["testsuites"] for c in s["testsuite"]]
skipped = sum(c.get("result") == "SKIPPED" for c in cases)
failed = sum("failures" in c for c in cases)
print(len(cases), len(cases) - skipped - failed, skipped, failed)
PY
}

run plain
read -r total ran skipped failed <<<"$(counts plain)"
if (( ran > 0 )); then
  echo "SKIP: a GPU is usable here ($ran of $total GPU tests ran): scripts/gpu-check covers this machine" >&2
  exit 77
fi
(( total > 0 )) || { echo "FAIL: the GPU test binary lists no tests" >&2; exit 1; }
(( failed == 0 && skipped == total )) || {
  grep -m 5 -A 3 "Failure" "$TMP/plain.log" >&2 || true
  echo "FAIL: without a GPU, $failed of $total GPU tests failed instead of skipping" >&2
  exit 1
}
echo "ok   without a GPU: all $total GPU tests skip"

run required HIQ_REQUIRE_GPU=1
read -r total ran skipped failed <<<"$(counts required)"
(( failed == total )) || {
  echo "FAIL: HIQ_REQUIRE_GPU=1 without a GPU: $failed of $total GPU tests failed ($skipped skipped, $ran ran)" >&2
  exit 1
}
grep -q "HIQ_REQUIRE_GPU is set but no GPU is usable" "$TMP/required.log" \
  || { echo "FAIL: HIQ_REQUIRE_GPU=1: the failures do not say why" >&2; exit 1; }
echo "ok   HIQ_REQUIRE_GPU=1 without a GPU: all $total GPU tests fail"

run broken LD_LIBRARY_PATH="$FAKE_DRIVER_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
read -r total ran skipped failed <<<"$(counts broken)"
(( failed == total )) || {
  echo "FAIL: a driver that fails to initialise: $failed of $total GPU tests failed ($skipped skipped, $ran ran)" >&2
  exit 1
}
grep -q "the GPU query failed" "$TMP/broken.log" || { echo "FAIL: broken driver: the failures do not say why" >&2; exit 1; }
echo "ok   a broken CUDA driver: all $total GPU tests fail ($(grep -m 1 -o 'cudaGetDeviceCount failed: [^(]*' "$TMP/broken.log"))"
