# Do the FlashInfer kernels carried as .gpu/flashinfer-aot.tar.xz (gpu_job.sh: FlashInfer) cover
# the 8B pair's servers? FLASHINFER_DISABLE_JIT=1 turns any kernel they lack into an error at its
# first use instead of a build, so a gated server that starts, speculates (C = 1) and runs off
# (C = 16) on the 1slim kit shows that FlashInfer plans can skip the JIT builds and the CCCL.
# - Run on c1008db with gpu_job.sh's kernel carrying as committed next, in one call (189 s after
#   install), as
#   bash benchmark/gpu_job.sh start benchmark/plans/flashinfer_aot.sh 250
#   benchmark/results/2026-12-04-flashinfer-aot-kernels: no build, no error.
phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
FLASHINFER_DISABLE_JIT=1 phase flashinfer-aot python3 benchmark/sweep.py \
  --run-dir "$RESULTS/flashinfer-aot" --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft \
  --thresholds 9 --scenarios closed --configs gate --concurrency 1,16 --prompts-per-concurrency 2 \
  --output-len 64 -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none
keep_lines "$RESULTS/flashinfer-aot/logs"
