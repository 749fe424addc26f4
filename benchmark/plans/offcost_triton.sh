# Item 3's final table and a GPU check of the final code, in one device session (issue 3).
# - What being off costs on Triton: the gate at N = 9 against a plain server, C = 16 to 128, each
#   level twice, 8B pair of accept length 2.2 (offcost.sh's Triton half, without its profile).
#   The code has changed since that plan's last run
#   (benchmark/results/2026-12-02-offcost-8b-2.2-both-backends): writes of at least 512 rows, with
#   a logits buffer of their own, and C = 16 alone was measured since (0.980-0.992x plain,
#   benchmark/results/2026-12-03-off-step-c16-512-row-writes).
# - Then the TP = 1 GPU suite on Triton in its short form: no test has passed on a GPU since the
#   write graph got its own logits buffer (66be704).
# About 10 device minutes for the sweep (offcost.sh's Triton half took 11 with its profile) and 11-13
# for the suite (8 tests took 10 in its last short run), after the host's start and the kit's install.
#   bash benchmark/gpu_job.sh start benchmark/plans/offcost_triton.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase triton python3 benchmark/sweep.py --run-dir "$RESULTS/triton" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate --concurrency 16,32,64,128 --prompts-per-concurrency 4 --repeat-levels 2 \
  --warm-up-level 64 --output-len 256 --output-len-spread 0.5 \
  -- --attention-backend triton --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/triton/logs"
phase tests gpu_tests triton 1b "not tensor_parallel" short
