# Item 3's table on FlashInfer on the final code, then the TP = 1 GPU suite on Triton in its
# 204-request form (issue 3, items 3 and 5).
# - The gate at N = 9 against a plain server, C = 16 to 128, each level twice, 8B pair of accept
#   length 2.2: offcost_triton.sh's sweep on FlashInfer. FlashInfer was last measured on ee043d2
#   (benchmark/results/2026-12-02-offcost-8b-2.2-both-backends), before the 512-row draft KV
#   writes and their own logits buffer; Triton on the final code:
#   benchmark/results/2026-12-03-offcost-8b-2.2-final-triton.
# - Then the suite's full form on Triton, whose last run was cut after 7 of 11 tests
#   (benchmark/results/2026-12-03-gpu-tests-204-requests-triton-cut); the greedy identity check
#   comes early, the sampled and Prometheus checks last.
# Needs the kit's FlashInfer wheel with CCCL (benchmark/results/2026-12-02-flashinfer-jit-on-the-kit).
# About 11 device minutes for the sweep, FlashInfer's first-start JIT included (the both-backends
# run's FlashInfer half took 12 with two profiled levels), and up to 15 for the suite.
#   bash benchmark/gpu_job.sh start benchmark/plans/offcost_flashinfer.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase flashinfer python3 benchmark/sweep.py --run-dir "$RESULTS/flashinfer" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate --concurrency 16,32,64,128 --prompts-per-concurrency 4 --repeat-levels 2 \
  --warm-up-level 64 --output-len 256 --output-len-spread 0.5 \
  -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/flashinfer/logs"
SPECGATE_GPU_BURSTS=10 phase tests gpu_tests triton 1b "not tensor_parallel" full
