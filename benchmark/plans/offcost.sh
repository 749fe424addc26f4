# What being off costs (issue 3, item 3): the gate at N = 9 against a plain server on both
# verified attention backends, C = 16 to 128, each level twice, on the 8B pair of accept length
# 2.2, with a profiled run of C = 128 for each server. Last run, on ee043d2:
# benchmark/results/2026-12-02-offcost-8b-2.2-both-backends (throughput 0.96-1.05x plain at
# every C, TPOT over 5 % at C = 16-32). Its 20-step level profiles held 4 prefills in one
# server's window and 8 in the other's: 100 steps now.
# About 25 device minutes on one H200, FlashInfer's first-start JIT included.
#   bash benchmark/gpu_job.sh start benchmark/plans/offcost.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
for backend in triton flashinfer; do
  phase "$backend" python3 benchmark/sweep.py --run-dir "$RESULTS/$backend" \
    --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
    --configs plain,gate --concurrency 16,32,64,128 --prompts-per-concurrency 4 --repeat-levels 2 \
    --warm-up-level 64 --output-len 256 --output-len-spread 0.5 --profile-level 128 --profile-steps 100 \
    -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none
  keep_lines "$RESULTS/$backend/logs"
done
