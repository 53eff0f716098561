export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH
gunzip -f .devbin/*.gz 2>/dev/null; chmod +x .devbin/*
hiq bench gemm --rows 2048,4096 --algorithms 10 --seconds 0.2 --json > $OUT/gemm-algorithms.json
