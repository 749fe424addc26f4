# The gate with tree drafting (issue 64), one part a session (TREE_PART). Ran: the gated case of
# the greedy test alone on Triton, short form, passed (da92e01, H100; the always-on control was cut
# by the session's budget: results/2026-12-07-tree-gated-greedy-1b-triton).
# - sweep: the 8B pair of accept length TREE_ACCEPT (default 2.2, its chain's), plain, the tree
#   always on (spec) and the gate at TREE_N (default 9, the chain's crossover at 2.2) with every
#   server resident (sweep.py --interleave), the tree TREE_STEPS / TREE_TOPK / TREE_DRAFT_TOKENS
#   (default 5 / 4 / 8, what SGLang picks for a Llama target) on TREE_BACKEND (default triton),
#   C = TREE_LEVELS (default 1..128), TREE_REPEATS runs a level (default 3) of 4·C prompts (at
#   least 16, outputs of 128-384 tokens, as auto.sh's sweep); then find_threshold.py (the tree's
#   crossover and the N it suggests) and report.py on the rows. Three 8B servers resident: an
#   H200 (run's needs_h200). About 13 minutes of runs from the chain's 2.2 sweep's throughputs
#   (results/2026-11-30-8b-accept-2.2), more if the tree always on is slower than the chain at
#   C = 64 and 128, plus three server starts: about 18 device minutes, not measured. Where the
#   suggested N is not TREE_N, a second session runs the gate
#   there (TREE_N=<N> TREE_CONFIGS=gate,plain):
#   TREE_PART=sweep bash benchmark/gpu_job.sh start benchmark/plans/tree.sh 290
# - tests: the GPU tests' tree variants (pytest -k tree: greedy identity across switches against
#   the always-on tree and the pair's design, the KV-probe re-enable) on the 1B pair, on each of
#   TREE_BACKENDS (default triton,flashinfer); about 10 device minutes a backend, estimated from
#   gpu_tests.sh's runs of their chain forms, not measured:
#   TREE_PART=tests bash benchmark/gpu_job.sh start benchmark/plans/tree.sh 290
#   FA3, what SGLang picks on Hopper with the tree it picks for a Llama target, with the carried
#   kernels (gpu_tests probes their causal reads; the tree's verify also reads its prefix
#   non-causally and merges), then its sweep beside the always-on tree:
#   TREE_PART=tests TREE_BACKENDS=fa3 bash benchmark/gpu_job.sh start benchmark/plans/tree.sh 290
#   TREE_PART=sweep TREE_BACKEND=fa3 bash benchmark/gpu_job.sh start benchmark/plans/tree.sh 290
# Each followed by `bash /tmp/gpu-job/gpu_job.sh wait 290` calls until the plan is done.
# - Not run yet.
tree=(--speculative-num-steps "${TREE_STEPS:-5}" --speculative-eagle-topk "${TREE_TOPK:-4}"
      --speculative-num-draft-tokens "${TREE_DRAFT_TOKENS:-8}")
case ${TREE_PART:-sweep} in
  sweep)
    accept=${TREE_ACCEPT:-2.2} run="$RESULTS/tree-sweep-8b-$accept"
    phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length "$accept" --seed 0 --device cuda
    phase "tree-sweep-$accept" python3 benchmark/sweep.py --interleave --run-dir "$run" \
      --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft "${tree[@]}" --thresholds "${TREE_N:-9}" \
      --configs "${TREE_CONFIGS:-plain,spec,gate}" --scenarios closed \
      --concurrency "${TREE_LEVELS:-1,2,4,8,16,32,64,128}" --repeat-levels "${TREE_REPEATS:-3}" \
      --prompts-per-concurrency 4 --min-prompts 16 --warm-up-level "${TREE_WARM_UP:-16}" \
      --output-len 256 --output-len-spread 0.5 \
      -- --attention-backend "${TREE_BACKEND:-triton}" --sampling-backend pytorch --grammar-backend none
    phase find-threshold python3 benchmark/find_threshold.py "$run"
    phase report python3 benchmark/report.py "$run"
    keep_lines "$run/logs" ;;
  tests)
    backends=${TREE_BACKENDS:-triton,flashinfer}
    for backend in ${backends//,/ }; do
      SPECGATE_GPU_BURSTS=3 phase "tests-$backend" gpu_tests "$backend" 1b tree tree
    done ;;
  *) log "unknown TREE_PART ${TREE_PART}: sweep or tests" ;;
esac
