# How much of the gate's cost on FlashInfer at C = 64 is its draft KV bookkeeping while off
# (deferred_draft_kv.py: buffering each step's and each prompt's rows, and their writes) rather
# than the spec-v2 step it keeps. Upstream's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 drops that
# bookkeeping (and with it the warm re-enable, so never a default): the gate against plain, both
# resident (--interleave), one measured run each after a warm-up, in what is left of a session
# (about 7 device minutes). The variable reaches both servers; plain runs no draft.
#   SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 bash benchmark/gpu_job.sh start benchmark/plans/skip_draft_kv_c64.sh 400
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase flashinfer-c64-skip-draft-kv python3 benchmark/sweep.py --interleave --run-dir "$RESULTS/flashinfer-c64-skip-draft-kv" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs gate,plain --concurrency 64 --prompts-per-concurrency 4 --repeat-levels 1 \
  --warm-up-level 64 --output-len 256 --output-len-spread 0.5 \
  -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/flashinfer-c64-skip-draft-kv/logs"
