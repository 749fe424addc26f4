# off_step_ab.sh cut to what one device session's remainder holds: C = 16 alone, where the gate
# fell short of plain (0.908-0.976x), and no GPU tests. Its first run found every gated server
# failing at start (the 512-row writes outgrew upstream's shared logits buffer; fixed).
#   bash benchmark/gpu_job.sh start benchmark/plans/off_step_c16.sh 560
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase triton python3 benchmark/sweep.py --run-dir "$RESULTS/triton" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate,gate-decode --concurrency 16 --prompts-per-concurrency 8 --repeat-levels 3 \
  --warm-up-level 16 --output-len 256 --output-len-spread 0.5 --ttft-stages --ttft-probe-interval 2 \
  --profile-level 16 --profile-steps 200 --profile-host \
  -- --attention-backend triton --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/triton/logs"
