# The gate against plain with both servers resident (sweep.py --interleave), so the two share the
# host and each round's order alternates, at AB_LEVELS (default 64) on AB_BACKEND (default
# flashinfer), AB_REPEATS runs a level (default 3) of AB_PROMPTS_PER_C x C prompts each
# (default 4: a run of 7-18 s on the 8B pair, whose single runs spread up to 8 %) after a
# warm-up, traced at AB_PROFILE_LEVEL where set (200 steps, the host recorded:
# host_ms_after_prefill among the summaries); then, where AB_TESTS is set, the GPU tests it
# selects (pytest -k, commas for "or") on Triton's 1B pair.
# - Run on d2cd530 as skip_draft_kv_c64.sh (AB_REPEATS=1, no tests) in what was left of a
#   session, with upstream's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the plan's environment,
#   which both servers inherit (plain runs no draft), in one call of 342 s:
#   SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 bash benchmark/gpu_job.sh start benchmark/plans/skip_draft_kv_c64.sh 395
#   benchmark/results/2026-12-04-flashinfer-c64-skip-draft-kv: 1.028x plain without the plain
#   steps' draft KV bookkeeping.
# - The first plain step after a prefill no longer writing (deferred_draft_kv.py), on a11ff10, in a
#   call of 545 s and three waits (the tests took 8.4 minutes):
#   AB_PROFILE_LEVEL=64 AB_TESTS=greedy_outputs_identical,gate_switched,reenable_is_warm,prompts_prefilled bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 545
#   benchmark/results/2026-12-04-flashinfer-c64-deferred-first-write: 0.952x plain, tests passed;
#   then, in one call of 525 s, AB_LEVELS=128 AB_REPEATS=2 (the same command, 525):
#   benchmark/results/2026-12-04-flashinfer-c128-deferred-first-write: 0.945x plain.
# - The off step's host diet (plain_step_constants.py; one host-length check in 8 batches; the
#   buffer's index columns in one copy; a one-request prefill's rows without per-token index work;
#   1024-row writes, half as many), on fe5545d, at C = 16, 32, 64 and 128 in one run, twice each,
#   then its GPU tests, in a call of 545 s and two waits of 290 (17 device minutes):
#   AB_LEVELS=16,32,64,128 AB_REPEATS=2 AB_TESTS=greedy_outputs_identical,gate_switched,reenable_is_warm,prompts_prefilled bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 545
#   benchmark/results/2026-12-04-flashinfer-host-diet-c16-128: 1.024 / 0.998 / 0.988 / 0.954x
#   plain, TPOT 1.08x at C = 128; then C = 128 once more, traced (AB_LEVELS=128 AB_REPEATS=1
#   AB_PROFILE_LEVEL=128, 396 s): benchmark/results/2026-12-04-flashinfer-c128-host-diet-traced.
# - The slimmer write graph (kv_only_draft.py: no Q columns, output projection or logits fill and
#   copy), on 352cd69, at the four levels three times each, traced at C = 128, then the two GPU
#   tests its own run skipped, in a call of 545 s and two waits of 290 (21 device minutes):
#   AB_LEVELS=16,32,64,128 AB_REPEATS=3 AB_PROFILE_LEVEL=128 AB_TESTS=greedy_outputs_identical,gate_switched bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 545
#   benchmark/results/2026-12-04-flashinfer-write-diet-c16-128: medians 0.995 / 0.988 / 0.975 /
#   1.007x plain, TPOT 1.03 / 1.02 / 1.02 / 1.01x; the writes' GPU time 102 us a step, from 190.
# - The same on Triton, on a8e8b68, with three GPU tests (the first GPU run of state_switch.py's
#   muted upstream line and of the Prometheus values test), in a call of 278 s and four waits
#   (the plan 20 minutes: the A/B 718 s, the tests 428 s):
#   AB_BACKEND=triton AB_LEVELS=16,32,64,128 AB_REPEATS=3 AB_TESTS=greedy_outputs_identical,gate_switched,prometheus_metrics bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 290
#   benchmark/results/2026-12-05-triton-ab-c16-128: medians 0.989 / 0.971 / 0.981 / 0.987x
#   plain, TPOT 1.026 / 1.029 / 1.028 / 1.057x; single runs down to 0.893x (C = 64, run 3).
# - Whether Triton's 5.7 % TPOT at C = 128 was the gate's or the short runs' spread: that level
#   alone, five runs of 8 x C (31.5-33.5 s each), on 4f228eb, in a call of 276 s and two waits
#   (the A/B 705 s):
#   AB_BACKEND=triton AB_LEVELS=128 AB_REPEATS=5 AB_PROMPTS_PER_C=8 bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 290
#   benchmark/results/2026-12-05-triton-ab-c128-long: median 0.979x plain, TPOT 1.014x (worst
#   run 1.023x); each server's own runs spread 4.4-4.8 %, against 7.7 % in runs of 4 x C.
# Next: the Speed table's four levels in runs of that length, on each backend (about 15 minutes
# of plan each):
#   AB_LEVELS=16,32,64,128 AB_REPEATS=3 AB_PROMPTS_PER_C=8 bash benchmark/gpu_job.sh start benchmark/plans/interleaved_ab.sh 290
backend=${AB_BACKEND:-flashinfer}
levels=${AB_LEVELS:-64}
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase "$backend-ab" python3 benchmark/sweep.py --interleave --run-dir "$RESULTS/$backend-ab" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs gate,plain --concurrency "$levels" --prompts-per-concurrency "${AB_PROMPTS_PER_C:-4}" --repeat-levels "${AB_REPEATS:-3}" \
  --warm-up-level "${levels##*,}" --output-len 256 --output-len-spread 0.5 \
  ${AB_PROFILE_LEVEL:+--profile-level "$AB_PROFILE_LEVEL" --profile-steps 200 --profile-host} \
  -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/$backend-ab/logs"
if [ -n "${AB_TESTS:-}" ]; then
  SPECGATE_GPU_BURSTS=3 phase tests gpu_tests triton 1b "${AB_TESTS//,/ or }"
fi
