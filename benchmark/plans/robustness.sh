# Robustness and correctness (issue 3, items 5, 6 and 9): a 20-minute soak around N = 8 on the
# 1B pair, and beside it on the same GPU the TP = 1 GPU suite in its 204-request form. About 25
# device minutes on one H200 (12-05: the host's start 90 s, install, kernel probe and pair 40 s,
# the soak server's start on FlashInfer 96 s, then the soak and 5 s idle); SOAK_SECONDS (default
# 1200) shortens the soak where less device time is left. ROBUSTNESS_BACKENDS (default
# flashinfer, whose plain steps take the gate's host lengths) picks the soaks' attention backends.
# The soak judges its own server's GPU memory, so the tests' servers do not count against it.
# FlashInfer on the 1B pair needs kernels for head dim 64, which the 1slim wheel cannot build.
# Without them the soak's server failed its start after 101 s and the tests' servers theirs, one
# by one (2026-12-04, 6 device minutes lost): the plan now stops first unless the carried kernels
# pass flashinfer_has_kernels' probe. flashinfer_kernels.py builds them (gpu_job.sh: FlashInfer).
# Last run on 75e805d, on Triton with an 11-minute soak (what the session had left after that):
# results/2026-12-04-soak-1b-n8-triton and results/2026-12-04-gpu-tests-204-requests-triton.
#   ROBUSTNESS_BACKENDS=triton SOAK_SECONDS=660 bash benchmark/gpu_job.sh start benchmark/plans/robustness.sh 280
# The last FlashInfer run was on d279a34 (the package as at 085f297), 15-minute soak:
# results/2026-12-03-soak-1b-n8-flashinfer-final; its 20-minute soak on e494898:
# results/2026-12-03-soak-1b-n8-flashinfer.
# Started on 4f228eb on 12-05: the kernels built on 12-04 on a CPU host passed their probe, their
# first run on a GPU (results/2026-12-04-flashinfer-kernels-built-on-cpu), and the host was lost
# 2.5 minutes into the soak, when a turn cut short missed the 30 s for the next `wait`.
# Next: the whole plan on FlashInfer, 20 minutes, first in a session with its 30 device minutes,
# then on Triton in the next. Since issue 59 the soak's load also asks for logprobs, carries stop
# strings, sends 6144-token prompts while the gate is off (3 chunks of 2048), drops requests
# before their first token and bursts past --max-running-requests into a 12288-token KV pool, so
# that requests queue and are retracted. Run so on ea1ad5c on 12-06 (H100): the suite passed on
# FlashInfer (results/2026-12-06-gpu-tests-204-requests-flashinfer); the soak failed on a
# stop-string contract SGLang does not keep (length before stop strings) and on a one-time GPU
# memory step after the 120 s warm-up (results/2026-12-06-soak-1b-n8-flashinfer-harder), both
# fixed in the soak since.
# ROBUSTNESS_BACKENDS (space-separated) soaks each backend at once on its own server (7 GB each):
# both 20-minute soaks in one session's device time, beside the suite on ROBUSTNESS_SUITE_BACKEND
# (default the first), then, while the soaks still run, the auto gate's GPU test on
# ROBUSTNESS_AUTO_SMOKE_BACKEND if set. SPECGATE_COMMIT names the commit in summary.json (the
# host's copy has no git history):
#   SPECGATE_COMMIT=$(git rev-parse --short HEAD) ROBUSTNESS_BACKENDS="flashinfer triton" \
#     ROBUSTNESS_AUTO_SMOKE_BACKEND=triton bash benchmark/gpu_job.sh start benchmark/plans/robustness.sh 290
read -ra backends <<< "${ROBUSTNESS_BACKENDS:-flashinfer}"
suite_backend=${ROBUSTNESS_SUITE_BACKEND:-${backends[0]}}
for backend in "${backends[@]}" "$suite_backend" ${ROBUSTNESS_AUTO_SMOKE_BACKEND:-}; do
  if [ "$backend" = flashinfer ] && ! flashinfer_has_kernels 1b; then
    return 1
  fi
done
phase pair python3 benchmark/model_pair.py /tmp/p1 --shape 1b --accept-length 2.2 --seed 0 --device cuda
soaks=() ports=() port=30005
for backend in "${backends[@]}"; do
  phase "soak-$backend" python3 benchmark/soak.py --run-dir "$RESULTS/soak-$backend" --duration "${SOAK_SECONDS:-1200}" \
    --model-path /tmp/p1/target --draft-model-path /tmp/p1/draft --threshold 8 --port "$port" \
    -- --attention-backend "$backend" --sampling-backend pytorch --grammar-backend none \
    --mem-fraction-static 0.2 --chunked-prefill-size 2048 --max-total-tokens 12288 &
  soaks+=($!) ports+=("$port")
  port=$((port + 20))  # SGLang takes a few ports above its own
done
# SGLang sizes a server's memory from what is free when it starts: the soaks' servers (7 GB
# each) start before the suite's (--mem-fraction-static 0.3), whose share would starve theirs.
for i in "${!soaks[@]}"; do
  for _ in $(seq 300); do
    kill -0 "${soaks[$i]}" 2>/dev/null && ! python3 -c "from benchmark.servers.endpoints import healthy
raise SystemExit(not healthy('http://127.0.0.1:${ports[$i]}'))" || break
    sleep 2
  done
done
SPECGATE_GPU_BURSTS=10 SPECGATE_GPU_MEM_FRACTION=0.3 \
  phase tests gpu_tests "$suite_backend" 1b "not tensor_parallel" full
if [ -n "${ROBUSTNESS_AUTO_SMOKE_BACKEND:-}" ] && kill -0 "${soaks[-1]}" 2>/dev/null; then
  SPECGATE_GPU_BURSTS=3 SPECGATE_GPU_MEM_FRACTION=0.3 \
    phase auto-smoke gpu_tests "$ROBUSTNESS_AUTO_SMOKE_BACKEND" 1b auto_gate smoke
fi
wait "${soaks[@]}"  # not a bare wait: gpu_job.sh's clock sampler runs in the background until the end
for backend in "${backends[@]}"; do
  keep_lines "$RESULTS/soak-$backend/logs"
done
