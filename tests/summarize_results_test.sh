#!/usr/bin/env bash
# scripts/summarize-results on the committed results (docs/data/results):
# every section comes out, and the paired table of Experiment B holds the
# INT8/BF16 p50 ratios that docs/results.md quotes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(python3 "$root/scripts/summarize-results" --data "$root/docs/data/results" --plots '')"
for section in "Experiment B" "Experiment A" "Capacity sweep (H200)" "Capacity sweep (hiq sim)" "Quality: quality-tiny-python-cpu.json" \
               "Quality: quality-qwen3-8b-random.json" "Quality: quality-tiny-python-cuda.json"; do
  grep -qF "## $section" <<<"$out" || { echo "FAIL: no section '$section'" >&2; exit 1; }
done
for ratio in "| 0.50 |" "| 0.58 |" "| 0.53 |"; do
  grep -qF -- "$ratio" <<<"$out" || { echo "FAIL: the paired table lacks $ratio" >&2; exit 1; }
  grep -qF -- "**${ratio:2:4}**" "$root/docs/results.md" || { echo "FAIL: docs/results.md lacks ${ratio:2:4}" >&2; exit 1; }
done
echo "ok   summarize-results: every section, and the paired ratios docs/results.md quotes"
