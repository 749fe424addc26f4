# What being off costs (issue 3, item 3): the gate at N = 9 against a plain server on both
# verified attention backends, C = 16 to 128, each level twice, on the 8B pair of accept length
# 2.2, with a profiled run of C = 128 for each server: at C = 128 on Triton the gate lost 4-17 %
# before the staged writes, its GPU idle 0.86 ms a step against plain's 0.36 and its GEMMs
# 0.32 ms longer (benchmark/results/2026-12-01-offcost-8b-2.2-c128-hosts/gate-first).
# About 27 device minutes on one H200, FlashInfer's first-start JIT included.
#   bash benchmark/gpu_job.sh start benchmark/plans/offcost.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
for backend in triton flashinfer; do
  phase "$backend" python3 benchmark/sweep.py --run-dir "$RESULTS/$backend" \
    --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
    --configs plain,gate --concurrency 16,32,64,128 --prompts-per-concurrency 4 --repeat-levels 2 \
    --warm-up-level 64 --output-len 256 --output-len-spread 0.5 --profile-level 128 \
    -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none
  keep_lines "$RESULTS/$backend/logs"
done
