export LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devbin:$PATH; chmod +x .devbin/*
gunzip .devbin/*.gz; chmod +x .devbin/*
export HIQ_REQUIRE_GPU=1
for v in t1; do compute-sanitizer --tool memcheck --error-exitcode 1 tests.$v --gtest_filter='*Attention*' 2>&1 | tail -2; done
for i in 1 2; do
  for b in old t0 t1; do echo "== $b $i"; hiq.$b bench attention --tokens 8192,16384 2>&1 | grep staged; done
done
for b in old t0 t1; do echo "== $b 2k, prefix"; hiq.$b bench attention --tokens 2048 --prefix 4096 2>&1 | grep staged;  hiq.$b bench attention --tokens 2048 2>&1 | grep staged; done
