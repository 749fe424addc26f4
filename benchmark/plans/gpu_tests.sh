# The GPU tests (test/gpu) alone, on each of GPU_TESTS_BACKENDS (default flashinfer,triton) in
# turn, with the generated GPU_TESTS_SHAPE (default 1b), selected by GPU_TESTS_FILTER (pytest -k;
# default all). FlashInfer's first start JITs its kernels: about 3 minutes of the session.
# - The off state's warm re-enable with the KV-only draft extend (f40130e),
#   about 10 minutes with both backends:
#   GPU_TESTS_FILTER=reenable_is_warm,prompts_prefilled bash benchmark/gpu_job.sh start benchmark/plans/gpu_tests.sh 560
backends=${GPU_TESTS_BACKENDS:-flashinfer,triton} filter=${GPU_TESTS_FILTER:-}
for backend in ${backends//,/ }; do
  phase "tests-$backend" gpu_tests "$backend" "${GPU_TESTS_SHAPE:-1b}" "${filter//,/ or }"
done
