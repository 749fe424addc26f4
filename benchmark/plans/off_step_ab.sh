# The off step's two paths on FlashInfer at C = 64 (issue 3, item 3), where the gate ran 0.90-0.96x
# plain in either start order (benchmark/results/2026-12-04-flashinfer-c64-gate-first and
# -plain-first). Traced, its off step (the one-token verify) held the host 6.0 ms with 407 host
# calls against plain's decode step's 2.6 ms and 153, and each prefill left the GPU idle while the
# host launched the prefill and then the next off step: 31.1 ms a prefill interval against 23.2
# with the same 13.8 ms of GPU work. --speculative-gate-off-step decode (plain_decode.py) runs the
# target's own decode step instead, without the verify's tree input, metadata and sampling.
# - plain, gate-decode and gate (the verify), all resident (--interleave), so the three share the
#   host and each round's order alternates; a gated server that fails to start leaves the others'
#   comparison standing.
# - A warm-up level, C = 64 three times, then a traced level of 200 steps per server.
# FlashInfer's kernels carried (gpu_job.sh: FlashInfer), about 12 device minutes:
#   bash benchmark/gpu_job.sh start benchmark/plans/off_step_ab.sh 545
#   bash /tmp/gpu-job/gpu_job.sh wait 290
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase flashinfer-c64 python3 benchmark/sweep.py --interleave --run-dir "$RESULTS/flashinfer-c64" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate-decode,gate --concurrency 64 --prompts-per-concurrency 4 --repeat-levels 3 \
  --warm-up-level 64 --output-len 256 --output-len-spread 0.5 \
  --profile-level 64 --profile-steps 200 --profile-host \
  -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/flashinfer-c64/logs"
