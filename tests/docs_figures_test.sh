#!/usr/bin/env bash
# Figures in the docs that the code or the committed data decide:
#   - docs/results.md's request counts per run set ("N in B, N in A, N in the
#     sweep") are the sums of `requests` in docs/data/results/*.jsonl;
#   - every "BF16's N tokens ... 8 GB" in docs/*.md is `hiq layout`'s bf16
#     capacity of qwen3-8b in 8 GB;
#   - docs/architecture.md's module diagram names every library of
#     src/CMakeLists.txt (hiq_<name> as <name>; hiq_model_loading and
#     hiq_model_cuda as model_loading and model_cuda; hiq_serving, hiq_http and
#     hiq_server_protocol under server).
#
# Usage: HIQ=/path/to/hiq tests/docs_figures_test.sh [SOURCE_DIR]
set -euo pipefail
: "${HIQ:?set HIQ to the path of the hiq binary}"
ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }

bf16_tokens="$("$HIQ" layout --model qwen3-8b --hicache-size 8GB --hicache-codec bf16 --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["capacity_tokens"])')"

python3 - "$ROOT" "$bf16_tokens" <<'PY'
import json, os, re, sys
root, bf16_tokens = sys.argv[1], int(sys.argv[2])
failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok: failures.append(what)

def count(text): return int(text.replace(",", ""))

# Request counts.
data = os.path.join(root, "docs", "data", "results")
def requests(name):
    with open(os.path.join(data, name)) as f:
        return sum(json.loads(line)["requests"] for line in f if line.strip())
results = open(os.path.join(root, "docs", "results.md")).read()
m = re.search(r"\(([\d,]+) in B, ([\d,]+) in A, ([\d,]+) in the sweep\)", results)
check(m is not None, "results.md gives the request counts of B, A and the sweep")
if m:
    for text, name in zip(m.groups(), ["experiment-b.jsonl", "experiment-a.jsonl", "capacity-sweep.jsonl"]):
        check(count(text) == requests(name), f"results.md says {text} requests for {name}; the data holds {requests(name):,}")

# BF16's capacity in 8 GB.
docs = os.path.join(root, "docs")
for name in sorted(os.listdir(docs)):
    if not name.endswith(".md"): continue
    text = open(os.path.join(docs, name)).read()
    for m in re.finditer(r"BF16's ([\d,]+)(?: tokens)?[^.]{0,40}?8 GB|([\d,]+) tokens \(BF16's in 8 GB\)|BF16's ([\d,]+) in 8 GB", text):
        n = next(g for g in m.groups() if g)
        check(count(n) == bf16_tokens, f"{name}: '{m.group(0)}' against hiq layout's {bf16_tokens:,}")

# The module diagram.
cmake = open(os.path.join(root, "src", "CMakeLists.txt")).read()
libraries = sorted(set(re.findall(r"add_library\((hiq_\w+)", cmake)))
arch = open(os.path.join(docs, "architecture.md")).read()
diagram = arch[arch.index("```"):arch.index("```", arch.index("```") + 3)]
server_parts = {"hiq_serving", "hiq_http", "hiq_server_protocol"}
for lib in libraries:
    if lib in server_parts:
        check(lib in diagram, f"architecture.md's diagram names {lib} (server)")
    else:
        module = lib[len("hiq_"):]
        check(re.search(r"^\s*" + re.escape(module) + r"\s", diagram, re.M) is not None,
              f"architecture.md's diagram has a row for {module} ({lib})")

# Scheduling: the engine's figures in docs/scheduling.md and results.md are
# those of the committed runs (p50 / mean ms rounded, hit rate to 0.1 %).
sched = os.path.join(docs, "data", "scheduling", "h200")
def runs(name):
    with open(os.path.join(sched, name)) as f:
        return [json.loads(line) for line in f if line.strip()]
def cell(r):
    return f"{1e3 * r['ttft_s']['p50']:.0f} / {1e3 * r['ttft_s']['mean']:.0f}, {100 * r['hit_rate']:.1f} %"
scheduling = open(os.path.join(docs, "scheduling.md")).read()
for point, title in (("gsp", "**Generated shared prefix**"), ("mt", "**Multi-turn**")):
    section = scheduling[scheduling.index(title):]
    for policy, column in (("fcfs", 2), ("lpm", 4)):
        for r in runs(f"bench-{point}-{policy}.jsonl"):
            row = re.search(r"^\| " + r["config"] + r" \|.*$", section, re.M)
            cols = [c.strip() for c in row.group(0).strip("|").split("|")] if row else []
            check(len(cols) > column and cols[column] == cell(r),
                  f"scheduling.md {point} {policy} engine {r['config']}: {cols[column] if len(cols) > column else None!r} "
                  f"against the data's {cell(r)!r}")
sweep = results[results.index("## Scheduling"):]
for r in runs("capacity-sweep-lpm.jsonl"):
    row = re.search(r"^\| " + str(r["num_groups"]) + r" \|.*$", sweep, re.M)
    check(row is not None and cell(r) in row.group(0),
          f"results.md's LPM capacity sweep, {r['num_groups']} groups, {r['config']}: {cell(r)}")
for policy in ("fcfs", "lpm"):
    by = {}
    for r in runs(f"experiment-b-{policy}.jsonl"):
        by.setdefault(r["config"], []).append(f"{1e3 * r['ttft_s']['p50']:.0f} / {1e3 * r['ttft_s']['mean']:.0f}")
    row = re.search(r"^\| " + policy + r"( \(default\))? \|.*$", scheduling, re.M)
    for config, cells in by.items():
        check(row is not None and ", ".join(cells) in row.group(0),
              f"scheduling.md's Experiment B row {policy}, {config}: {', '.join(cells)}")
sys.exit(1 if failures else 0)
PY
