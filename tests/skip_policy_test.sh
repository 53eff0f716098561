#!/usr/bin/env bash
# A test that cannot run must say "Skipped", never "Passed". Checks:
#  - no tests/*.sh leaves early with `exit 0` (a script passes by reaching its
#    end), and every script that prints SKIP exits 77 right after;
#  - every test ctest runs other than a Google Test case has SKIP_RETURN_CODE
#    77, so that exit 77 reads as Skipped (tests/CMakeLists.txt sets it last);
#  - without cpp-httplib the HTTP tests leave a Skipped placeholder behind.
#
# Usage: tests/skip_policy_test.sh SOURCE_DIR BUILD_DIR CTEST
set -euo pipefail

ROOT="$1" BUILD="$2" CTEST="$3"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
"$CTEST" --test-dir "$BUILD" --show-only=json-v1 >"$BUILD/skip_policy_tests.json"
python3 - "$ROOT/tests" "$BUILD/skip_policy_tests.json" <<'PY'
import json, pathlib, re, sys

tests_dir, listing = pathlib.Path(sys.argv[1]), json.load(open(sys.argv[2]))
failures = []

def code(line):
    """The line without comments and quoted text: what the shell runs."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'[^']*'", "''", line)
    return re.sub(r"(^|\s)#.*", "", line)

for script in sorted(tests_dir.glob("*.sh")):
    lines = script.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if re.search(r"\bexit\s+0\b", code(line)):
            failures.append(f"{script.name}:{n}: exit 0 before the end (skip with exit 77): {line.strip()}")
        if re.search(r"\b(echo|printf)\b.*\bSKIP\b", line) and not any(re.search(r"\bexit\s+77\b", code(l)) for l in lines[n - 1:n + 2]):
            failures.append(f"{script.name}:{n}: prints SKIP without exit 77 on the next lines")

for test in listing["tests"]:
    command = test.get("command", [])
    if any(arg.startswith("--gtest_filter=") for arg in command) or test["name"].endswith("_NOT_BUILT"):
        continue  # a Google Test case (GTEST_SKIP shows as Skipped) or gtest's failing placeholder
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    if str(props.get("SKIP_RETURN_CODE")) != "77":
        failures.append(f"ctest test {test['name']} lacks SKIP_RETURN_CODE 77 "
                        "(add it before the last block of tests/CMakeLists.txt)")

names = {t["name"] for t in listing["tests"]}
if not any(n.startswith("HttpServer") or n.startswith("hiq_http_tests") or n == "http_server_tests_skipped"
           for n in names):
    failures.append("neither the HTTP tests nor their Skipped placeholder are registered")

for f in failures:
    print("FAIL", f, file=sys.stderr)
if failures:
    sys.exit(1)
print(f"ok   {len(list(tests_dir.glob('*.sh')))} scripts and {len(names)} ctest tests follow the skip policy")
PY
