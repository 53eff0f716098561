export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH
gunzip -f .devbin/*.gz 2>/dev/null; chmod +x .devbin/*
python3 scripts/qwen3-8b-check --build-only --dir /tmp/q8 2>&1 | tail -1
python3 scripts/runtime-reference --hiq .devbin/hiq --model /tmp/q8 --json $OUT/ref-1.json 2>&1 | grep -v Warn
