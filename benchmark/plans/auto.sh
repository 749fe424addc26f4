# The auto gate (--speculative-disable-batch-threshold auto, issue 60), one part a session
# (AUTO_PART), each within a session's 30 device minutes. Ran: the smoke, on Triton and FlashInfer
# (da92e01, H100, 145 s and 98 s of test after the host's start; results/2026-12-07-auto-gate-first-gpu-run-1b),
# FlashInfer again on the shared workspace (83984ac; results/2026-12-07-auto-shared-workspace-flashinfer-1b),
# Triton with the live factors (b6492eb; results/2026-12-07-auto-live-factors-1b-triton).
# - smoke: the GPU test of the auto gate alone, on AUTO_BACKEND's (default Triton's) 1B pair
#   (calibration on real graphs, greedy outputs on the design, the chosen k exported), then its
#   server log's "spec gate" lines (the measured cost table, the states' build time and memory):
#   AUTO_PART=smoke bash benchmark/gpu_job.sh start benchmark/plans/auto.sh 290
# - sweep: the 8B pair at AUTO_ACCEPT (default 2.2; then 3.2 and 1.3, a session each), plain,
#   always-on, the gate at AUTO_N (default 9, the crossover at 2.2) and the auto gate with every
#   server resident (four 8B servers: an H200, run's needs_h200), at AUTO_LEVELS (default
#   C = 1..128), AUTO_REPEATS (default 3) runs a level of 4·C prompts (at least 16), outputs of
#   128-384 tokens, after a warm-up at AUTO_WARM_UP (default 16; one of the levels). From the 2.2 sweep's throughputs (results/2026-11-30-8b-accept-2.2), about
#   17 minutes of runs, most of them always-on at C = 64 and 128 and every server at C = 1,
#   plus four server starts: about 23 minutes:
#   AUTO_PART=sweep AUTO_ACCEPT=2.2 AUTO_N=9 bash benchmark/gpu_job.sh start benchmark/plans/auto.sh 290
#   Whether the context length moves the best k (the cost table is timed at the graphs' captured
#   lengths): the same part with prompts of AUTO_CONTEXT_CHARS characters of file context
#   (default 1,500, about 400 tokens), fewer servers and levels that fit their KV, in a folder
#   named after it, e.g.
#   AUTO_PART=sweep AUTO_CONTEXT_CHARS=8000 AUTO_CONFIGS=plain,spec,gate-auto AUTO_LEVELS=2,4,8,16,32 ...
# - shift (about 22 minutes, fits an H100): the 8B pair with two domains (accept 3.2 and 1.3),
#   the shift scenario (the domain switching every 60 s, C stepping 4, 64, 16, 32 every 15 s,
#   AUTO_SHIFT_ROUNDS (default 2) rounds of both domains) on AUTO_SHIFT_CONFIGS (default the auto
#   gate, upstream's --speculative-adaptive, plain and always-on: the summary puts every fixed N
#   together from plain's and always-on's segments, the five behaviours the levels leave, where
#   two gate servers ran two of them; gate at AUTO_SHIFT_N, default 9,31, runs a fixed N), one server
#   at a time, upstream's as SGLang ships it (--upstream-as-shipped) at S = 7: at S = 3 it
#   crashes at start-up with or without this plugin, its default slots reaching 7 steps
#   (results/2026-12-07-shift-upstream-adaptive-as-shipped; S = 7 not yet run). Results in a
#   folder whose name holds "shift". Ran once (83984ac, before the cold-draft fix); next, again:
#   AUTO_PART=shift bash benchmark/gpu_job.sh start benchmark/plans/auto.sh 290
backend=${AUTO_BACKEND:-triton}
server_flags=(--attention-backend "$backend" --sampling-backend pytorch --grammar-backend none)
case ${AUTO_PART:-smoke} in
  smoke)
    SPECGATE_GPU_BURSTS=3 phase tests gpu_tests "$backend" 1b auto_gate ;;
  sweep)
    accept=${AUTO_ACCEPT:-2.2} name=auto-sweep-8b-${AUTO_ACCEPT:-2.2}${AUTO_CONTEXT_CHARS:+-context-$AUTO_CONTEXT_CHARS}
    phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length "$accept" --seed 0 --device cuda
    phase "$name" python3 benchmark/sweep.py --interleave --run-dir "$RESULTS/$name" \
      --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds "${AUTO_N:-9}" \
      --configs "${AUTO_CONFIGS:-plain,spec,gate,gate-auto}" --scenarios closed \
      --concurrency "${AUTO_LEVELS:-1,2,4,8,16,32,64,128}" ${AUTO_CONTEXT_CHARS:+--context-chars "$AUTO_CONTEXT_CHARS"} \
      --prompts-per-concurrency 4 --min-prompts 16 --repeat-levels "${AUTO_REPEATS:-3}" \
      --warm-up-level "${AUTO_WARM_UP:-16}" --output-len 256 --output-len-spread 0.5 -- "${server_flags[@]}"
    keep_lines "$RESULTS/$name/logs" ;;
  shift)
    # On FA3 (AUTO_BACKEND=fa3, the carried kernels) the crossovers lie far above Triton's
    # (results/2026-12-07-fa3-spec-upstream-gate-8b-2.2-h100): give AUTO_SHIFT_N from there.
    run="$RESULTS/shift-8b-3.2-1.3${AUTO_BACKEND:+-$backend}"
    if [ "$backend" != fa3 ] || fa3_has_kernels 8b; then
      phase pair python3 benchmark/model_pair.py /tmp/p8d --shape 8b --accept-length 3.2,1.3 --seed 0 --device cuda
      phase shift python3 -m benchmark.client.shift --run-dir "$run" \
        --model-path /tmp/p8d/target --draft-model-path /tmp/p8d/draft --design /tmp/p8d/design.json \
        --configs "${AUTO_SHIFT_CONFIGS:-gate-auto,upstream-adaptive,plain,spec}" --thresholds "${AUTO_SHIFT_N:-9,31}" --upstream-as-shipped --upstream-adaptive-steps 7 \
        --phases 2 --phase-s 60 --concurrency 4,64,16,32 --concurrency-s 15 --rounds "${AUTO_SHIFT_ROUNDS:-2}" \
        -- "${server_flags[@]}"
      keep_lines "$run/logs"
    fi ;;
  *) log "unknown AUTO_PART ${AUTO_PART}: smoke, sweep or shift" ;;
esac
