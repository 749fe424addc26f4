# Item 3's table on one attention backend, then the TP = 1 GPU suite on Triton (issue 3, items 3
# and 5). OFFCOST_BACKEND (default triton) is the sweep's backend; SPECGATE_GPU_BURSTS (default 3,
# the short form; 10 for 204 requests; 0 for none) sizes the suite. OFFCOST_LEVELS (default
# 16,32,64,128) are the sweep's concurrencies, and OFFCOST_PROFILE_LEVEL, where set, adds a
# host-and-GPU trace of 200 forward steps at that concurrency: what each prefill cost the
# decoding requests (kernel_profile.prefill_intervals, by the host's step spans) and where the
# host's time went (kernel_profile.host_time, idle_causes, prefill_pauses) and how fast it ran
# (host_pace).
# - The sweep: the gate at N = 9 against a plain server, C = 16 to 128, each level twice, 8B pair
#   of accept length 2.2 (offcost.sh's sweep for one backend, without its profile).
# - Run with the defaults on 085f297 (then named offcost_triton.sh):
#   benchmark/results/2026-12-03-offcost-8b-2.2-final-triton (553 s) and
#   benchmark/results/2026-12-03-gpu-tests-triton-1b-final (705 s).
# - Run on 76cecc4 with OFFCOST_BACKEND=flashinfer SPECGATE_GPU_BURSTS=10:
#   benchmark/results/2026-12-03-offcost-8b-2.2-final-flashinfer (724 s with FlashInfer's JIT;
#   0.931-0.947x plain at C = 64 and 128, each prefill 2.5-6.6 ms dearer than plain's) and
#   benchmark/results/2026-12-03-gpu-tests-204-requests-triton-final (866 s). FlashInfer needs the
#   kit's wheel with CCCL (benchmark/results/2026-12-02-flashinfer-jit-on-the-kit).
# - Run on 819a7eb, on two hosts, as
#   OFFCOST_BACKEND=flashinfer OFFCOST_LEVELS=64,128 OFFCOST_PROFILE_LEVEL=128 SPECGATE_GPU_BURSTS=0 bash benchmark/gpu_job.sh start benchmark/plans/offcost_backend.sh 560
#   OFFCOST_LEVELS=64,128 OFFCOST_PROFILE_LEVEL=128 SPECGATE_GPU_BURSTS=0 bash benchmark/gpu_job.sh start benchmark/plans/offcost_backend.sh 560
#   benchmark/results/2026-12-03-flashinfer-c128-traced (759 s; the gate's host ran every call
#   1.46x as long as plain's) and benchmark/results/2026-12-03-triton-c128-traced (530 s; hosts
#   alike, the gate's host adds 2.5 ms a prefill). Next: start_order.sh.
backend=${OFFCOST_BACKEND:-triton}
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
phase "$backend" python3 benchmark/sweep.py --run-dir "$RESULTS/$backend" \
  --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
  --configs plain,gate --concurrency "${OFFCOST_LEVELS:-16,32,64,128}" --prompts-per-concurrency 4 \
  --repeat-levels 2 --warm-up-level 64 --output-len 256 --output-len-spread 0.5 \
  ${OFFCOST_PROFILE_LEVEL:+--profile-level "$OFFCOST_PROFILE_LEVEL" --profile-steps 200 --profile-host} \
  -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/$backend/logs"
bursts=${SPECGATE_GPU_BURSTS:-3}
[ "$bursts" = 0 ] || phase tests gpu_tests triton 1b "not tensor_parallel" "bursts$bursts"
