export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH
gunzip -f .devbin/*.gz 2>/dev/null; chmod +x .devbin/*
export HIQ_REQUIRE_GPU=1
compute-sanitizer --tool memcheck --error-exitcode 1 hiq_gpu_tests --gtest_filter='*Attention*' 2>&1 | tail -2
compute-sanitizer --tool racecheck --error-exitcode 1 hiq_gpu_tests --gtest_filter='*AttentionDecode*' 2>&1 | tail -2
(python3 scripts/qwen3-8b-check --build-only --dir /tmp/q8 2>&1 | tail -1) &
hiq_gpu_tests --gtest_filter='*Model*:*Graph*:*Decode*' 2>&1 | grep -E "PASSED|FAILED" | tail -5
wait
for i in 1 2; do for b in hiq.old hiq; do
  echo "== $b $i"; $b bench model --model /tmp/q8 --prefill 2048 --decode-batches 1,8,32 --decode-context 2048 --hicache-codec int8 --seconds 0.5 --json > $OUT/$b-$i.json 2>/dev/null
  python3 -c "
import json,sys; d=json.load(open('$OUT/$b-$i.json'))
for r in d['decode']: print(r['batch'], 'graph %.3f eager %.3f floor %.3f'%(r['step_seconds']*1e3, r['eager_step_seconds']*1e3, r.get('floor_seconds',0)*1e3), 'attn %.3f'%(r['components'].get('attention_s',0)*1e3))
"
done; done
