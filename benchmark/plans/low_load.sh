# Where the gate's TPOT goes at low load (issue 3, item 3). At C = 16 and 32 the gate kept
# 0.96-0.99x plain's throughput but ran up to 7.5 % over plain's TPOT, while its median ITL was
# within 2 %. Its mean TTFT there was 6-25 % over plain's, and each prefill cost the decoding
# requests a few ms more (benchmark/results/2026-12-02-offcost-8b-2.2-both-backends). So this
# plan looks at prefills.
# - Each level runs three times, with twice offcost.sh's prompts.
# - Server-side TTFT stages come along, with a probe request every 2 s split across processes.
# - A host-and-GPU trace of 200 forward steps at C = 16 shows what the scheduler did around
#   each prefill (kernel_profile.idle_causes).
# Then, with the GPU to itself, the TP = 1 GPU suite on Triton in its 204-request form (last
# passed in full on `085f297`'s package: results/2026-12-03-gpu-tests-204-requests-triton-final).
# About 12 device minutes on one H200 for the sweep, 11 more for the suite; the suite comes last,
# so a session short of time loses only it.
#   bash benchmark/gpu_job.sh start benchmark/plans/low_load.sh 560
# - Run on 11960db (the code of e494898): results/2026-12-03-offcost-8b-2.2-low-load-triton, and
#   the suite cut by the device budget after 7 of 11, results/2026-12-03-gpu-tests-204-requests-triton-cut.
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase triton python3 benchmark/sweep.py --run-dir "$RESULTS/triton" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate --concurrency 16,32 --prompts-per-concurrency 8 --repeat-levels 3 \
  --warm-up-level 16 --output-len 256 --output-len-spread 0.5 --ttft-stages --ttft-probe-interval 2 \
  --profile-level 16 --profile-steps 200 --profile-host \
  -- --attention-backend triton --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/triton/logs"
SPECGATE_GPU_BURSTS=10 phase tests gpu_tests triton 1b "not tensor_parallel" full
