# TP = 2 (issue 3, item 8), on the 2 x H200 host: the gated server at TP = 2 must return the
# pair's designed greedy output, as TP = 1 servers do, on both verified backends.
#   bash benchmark/gpu_job.sh start benchmark/plans/tensor_parallel.sh 560   (kind nvidia-h200-x2)
# - Not run yet. TP = 2 last ran by hand, Triton only, on 7eb185a (the code of 2026-11-30):
#   results/2026-11-30-tp2-identity-1b.
# FlashInfer's 1B kernels must be in the carried archive (gpu_job.sh: FlashInfer), or gpu_tests
# logs FlashInfer as not run.
for backend in triton flashinfer; do
  phase "tp2-$backend" gpu_tests "$backend" 1b "tensor_parallel or greedy_outputs_identical" tp2
done
