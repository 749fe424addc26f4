# Is the FlashInfer gate's slower host its code or where it ran? (issue 3, item 3)
# At C = 128 the gate's server ran every host call 1.3-1.6x as long as plain's, the same calls,
# while on Triton, another host, the two ran alike
# (benchmark/results/2026-12-03-flashinfer-c128-traced, -triton-c128-traced). FlashInfer's
# prefills are bound by the host, so a slower host alone costs the gate what the table shows.
# Here each server starts twice, in both orders, each time with its C = 128 level twice and a
# traced level (host_pace, prefill_pauses) and the machine's CPU over every level (cpu_machine):
# a gate slower in all four starts is its code, one slower in some is the host's placement.
# About 16 minutes after install, FlashInfer's JIT in the first start included:
#   bash benchmark/gpu_job.sh start benchmark/plans/host_pace.sh 560   (then waits)
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
for order in plain,gate gate,plain; do
  name="flashinfer-${order/,/-first-}"
  phase "$name" python3 benchmark/sweep.py --run-dir "$RESULTS/$name" \
    --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
    --configs "$order" --concurrency 128 --prompts-per-concurrency 4 --repeat-levels 2 \
    --warm-up-level 128 --output-len 256 --output-len-spread 0.5 \
    --profile-level 128 --profile-steps 200 --profile-host \
    -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none
  keep_lines "$RESULTS/$name/logs"
done
