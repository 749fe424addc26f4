# The off step's two paths at low load (issue 3, item 3). At C = 16 the gate ran at 0.908-0.976x
# plain's throughput on Triton 8B. Its off step cost the GPU what a plain step does, but it needed
# more host time to launch, and each prefill then left the GPU idle
# (benchmark/results/2026-12-03-offcost-8b-2.2-low-load-triton).
# --speculative-gate-off-step decode (plain_decode.py) skips the one-token verify's host work.
# Both gates now write a prompt's draft rows in one 512-row replay, where that run took four or
# five 128-row replays after each prefill (deferred_draft_kv.MIN_WRITE_ROWS).
# - plain, gate (the verify, the default) and gate-decode, one after the other on one host.
# - Each level runs three times: C = 16 and 32, twice offcost.sh's prompts.
# - Each server ends with a host-and-GPU trace of 200 steps at C = 16, kept with its summary.
#   The summary includes host time by span (kernel_profile.host_time).
# - gate-decode runs before gate: a session cut short still has plain against the decode step,
#   and the gate at C = 16 on this code was measured on 2026-12-03
#   (benchmark/results/2026-12-03-off-step-c16-512-row-writes).
# Then the short GPU tests on Triton: greedy identity over switches on the default path, and the
# same with decode steps (test_off_step_decode_stays_exact).
# About 17 device minutes for the sweep and 5 for the tests, on one H200. Its first run, on
# 5792941, found the gated servers failing at start (fixed in 66be704).
#   bash benchmark/gpu_job.sh start benchmark/plans/off_step_ab.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase triton python3 benchmark/sweep.py --run-dir "$RESULTS/triton" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate-decode,gate --concurrency 16,32 --prompts-per-concurrency 8 --repeat-levels 3 \
  --warm-up-level 16 --output-len 256 --output-len-spread 0.5 --ttft-stages --ttft-probe-interval 2 \
  --profile-level 16 --profile-steps 200 --profile-host \
  -- --attention-backend triton --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/triton/logs"
SPECGATE_GPU_BURSTS=3 phase tests gpu_tests triton 1b \
  "only_sglangs_tail or greedy_outputs_identical or gate_switched or off_step_decode" ab
