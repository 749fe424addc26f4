# Robustness and correctness on FlashInfer, whose plain steps take the gate's host lengths
# (issue 3, items 5, 6 and 9): a 20-minute soak around N = 8 on the 1B pair, and beside it on the
# same GPU the TP = 1 GPU suite in its 204-request form. About 27 device minutes on one H200;
# SOAK_SECONDS (default 1200) shortens the soak where less device time is left.
# The soak judges its own server's GPU memory, so the tests' servers do not count against it.
# Last run on d279a34 (the package as at 085f297: 512-row draft KV writes with their own logits
# buffer), with a 15-minute soak: results/2026-12-03-soak-1b-n8-flashinfer-final and
# results/2026-12-03-gpu-tests-204-requests-flashinfer-final (1,087 s). The 20-minute soak last
# ran on e494898: results/2026-12-03-soak-1b-n8-flashinfer.
#   bash benchmark/gpu_job.sh start benchmark/plans/robustness.sh 560
#   SOAK_SECONDS=900 bash benchmark/gpu_job.sh start benchmark/plans/robustness.sh 560   (the last run)
# Next: the whole plan on the current code, which has not soaked since 085f297 (the deferred first
# write, the off step's host cuts, 1024-row writes, the slimmer write graph) and has run five of the
# GPU tests only, short form on Triton (results/2026-12-04-flashinfer-write-diet-c16-128).
phase pair python3 benchmark/model_pair.py /tmp/p1 --shape 1b --accept-length 2.2 --seed 0 --device cuda
phase soak python3 benchmark/soak.py --run-dir "$RESULTS/soak" --duration "${SOAK_SECONDS:-1200}" \
  --model-path /tmp/p1/target --draft-model-path /tmp/p1/draft --threshold 8 --port 30005 \
  -- --attention-backend flashinfer --sampling-backend pytorch --grammar-backend none \
  --mem-fraction-static 0.2 &
soak=$!
SPECGATE_GPU_BURSTS=10 SPECGATE_GPU_MEM_FRACTION=0.3 \
  phase tests gpu_tests flashinfer 1b "not tensor_parallel" full
wait "$soak"  # not a bare wait: gpu_job.sh's clock sampler runs in the background until the end
keep_lines "$RESULTS/soak/logs"
