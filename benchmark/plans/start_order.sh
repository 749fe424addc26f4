# The gate against plain with each server started first once (issue 3, item 3).
# In one FlashInfer A/B the server started second ran every host call 1.23-1.28x as long,
# whichever it was, and the gate, whose prefills wait on its host, lost 5 % more started second
# (0.923x plain) than first (0.973x): benchmark/results/2026-12-03-flashinfer-c128-start-order.
# Every earlier table started plain first. Here the sweep runs twice, plain first and gate first,
# at START_ORDER_LEVELS (default 128), each level twice after a warm-up at the last level; the
# order-balanced ratio is the geometric mean of the two orders' (report.py --order-balanced
# DIR DIR, the two sweeps' directories). Every level records where each
# scheduler ran (cpu_placement: its CPUs, its core's other hardware thread, NUMA nodes).
# START_ORDER_BACKEND (default flashinfer) is the attention backend; START_ORDER_PROFILE_LEVEL,
# where set, adds a trace of 200 forward steps with the host at that concurrency (host_pace,
# host_calls_per_step, prefill_pauses). The GPU tests are plans/gpu_tests.sh's: on FlashInfer
# they take about 14 minutes (its JIT included), too many to share a session with these sweeps.
# - Run on d91bfbf as host_pace.sh, FlashInfer's JIT in the first start (942 + 606 s), as
#   START_ORDER_PROFILE_LEVEL=128 bash benchmark/gpu_job.sh start benchmark/plans/start_order.sh 560
#   benchmark/results/2026-12-03-flashinfer-c128-start-order.
# - Run on d402f4b at C = 128 only, in calls of 290 s (16 minutes after install), as
#   START_ORDER_LEVELS=128 bash benchmark/gpu_job.sh start benchmark/plans/start_order.sh 290
#   benchmark/results/2026-12-04-flashinfer-c128-start-order-kv-store.
# - START_ORDER_ORDERS (default "plain,gate gate,plain") picks the orders, one sweep each.
# - Run on c1008db (package of 51ed271) with the gate first only, at C = 64, FlashInfer's JIT in
#   the gate's start (572 s), in one call of 545 s and a wait, as
#   START_ORDER_LEVELS=64 START_ORDER_ORDERS=gate,plain bash benchmark/gpu_job.sh start benchmark/plans/start_order.sh 545
#   benchmark/results/2026-12-04-flashinfer-c64-gate-first: 0.918 · 0.959x plain.
# - Run on 3855500 with plain first, at C = 64, traced, the kernels carried (gpu_job.sh:
#   FlashInfer), in one call of 545 s and a wait, as
#   START_ORDER_LEVELS=64 START_ORDER_ORDERS=plain,gate START_ORDER_PROFILE_LEVEL=64 bash benchmark/gpu_job.sh start benchmark/plans/start_order.sh 545
#   benchmark/results/2026-12-04-flashinfer-c64-plain-first: 0.919x plain order-balanced; each
#   prefill and the off step after it bound by the host.
backend=${START_ORDER_BACKEND:-flashinfer}
levels=${START_ORDER_LEVELS:-128}
orders=${START_ORDER_ORDERS:-plain,gate gate,plain}
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
for order in $orders; do
  name="$backend-${order/,/-first-}"
  phase "$name" python3 benchmark/sweep.py --run-dir "$RESULTS/$name" \
    --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
    --configs "$order" --concurrency "$levels" --prompts-per-concurrency 4 \
    --repeat-levels 2 --warm-up-level "${levels##*,}" --output-len 256 --output-len-spread 0.5 \
    ${START_ORDER_PROFILE_LEVEL:+--profile-level "$START_ORDER_PROFILE_LEVEL" --profile-steps 200 --profile-host} \
    -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none
  keep_lines "$RESULTS/$name/logs"
done
