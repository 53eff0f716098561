export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH
gunzip -f .devbin/*.gz 2>/dev/null; chmod +x .devbin/*
export HIQ_REQUIRE_GPU=1
compute-sanitizer --tool memcheck --error-exitcode 1 hiq_gpu_tests --gtest_filter='*Attention*' 2>&1 | grep -E "PASSED|FAILED|ERROR SUMMARY"
timeout 100 hiq_gpu_tests --gtest_filter='*Model*:*Graph*:*Decode*:*Tp*' 2>&1 | grep -E "PASSED|FAILED" | tail -4
hiq bench attention --tokens 8192 --seconds 0.2 2>&1 | tail -3
