export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH
gunzip -f .devbin/*.gz 2>/dev/null; chmod +x .devbin/*
export HIQ_REQUIRE_GPU=1
(python3 scripts/qwen3-8b-check --build-only --dir /tmp/q8 2>&1 | tail -1) &
for st in 2 3 4 6; do HIQ_DECODE_STAGES=$st compute-sanitizer --tool memcheck --error-exitcode 1 hiq_gpu_tests --gtest_filter='*AttentionDecode*' 2>&1 | grep -E "PASSED|FAILED|ERROR SUMMARY" | sed "s/^/stages $st: /"; done
wait
for r in 1; do for st in 2 3 4 6; do
  HIQ_DECODE_STAGES=$st hiq bench model --model /tmp/q8 --prefill 512 --decode-batches 1,8,32 --decode-context 2048 --hicache-codec int8 --seconds 0.3 --json > $OUT/st$st-$r.json 2>/dev/null
  python3 -c "
import json; d=json.load(open('$OUT/st$st-$r.json'))
print('stages $st run $r', ' | '.join('b%d graph %.3f attn %.3f'%(x['batch'], x['step_seconds']*1e3, x['components'].get('attention_s',0)*1e3) for x in d['decode']))
"
done; done
