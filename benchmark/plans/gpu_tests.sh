# The GPU tests (test/gpu) alone, on each of GPU_TESTS_BACKENDS (default flashinfer,triton) in
# turn, with the generated GPU_TESTS_SHAPE (default 1b), selected by GPU_TESTS_FILTER (pytest -k;
# default all); SPECGATE_GPU_BURSTS (default 3) reaches the tests (10: the 200 requests).
# FlashInfer's first start on a host JITs its kernels: about 3 minutes of the session.
# - Run on 7bc8fe1 after start_order.sh's tests were cut short: FlashInfer in 410 s, then Triton
#   again alone (GPU_TESTS_BACKENDS=triton, 322 s), benchmark/results/2026-12-03-gpu-tests-kv-store:
#   GPU_TESTS_FILTER=reenable_is_warm,prompts_prefilled bash benchmark/gpu_job.sh start benchmark/plans/gpu_tests.sh 560
# - The off state's draft KV on FlashInfer, short form, about 14 minutes over two calls:
#   GPU_TESTS_BACKENDS=flashinfer GPU_TESTS_FILTER=greedy_outputs_identical,gate_switched,reenable_is_warm,prompts_prefilled bash benchmark/gpu_job.sh start benchmark/plans/gpu_tests.sh 560
# - On 352cd69, after interleaved_ab.sh's run had taken the greedy and switching tests, on Triton
#   in one call of 372 s, 3 passed (benchmark/results/2026-12-04-flashinfer-write-diet-c16-128):
#   GPU_TESTS_BACKENDS=triton GPU_TESTS_FILTER=reenable_is_warm,prompts_prefilled,logprob_requests_while_off bash benchmark/gpu_job.sh start benchmark/plans/gpu_tests.sh 420
backends=${GPU_TESTS_BACKENDS:-flashinfer,triton} filter=${GPU_TESTS_FILTER:-}
for backend in ${backends//,/ }; do
  phase "tests-$backend" gpu_tests "$backend" "${GPU_TESTS_SHAPE:-1b}" "${filter//,/ or }"
done
