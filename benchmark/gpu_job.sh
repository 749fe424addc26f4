#!/usr/bin/env bash
# Run a plan of GPU phases detached on the project's lent, air-gapped GPU host, where one call
# lasts at most 10 minutes and the host stays warm for about 30 s after each call.
#
#   bash benchmark/gpu_job.sh start PLAN SECONDS    a plan's first call, with the GPU kit carried
#                                                   as .gpu/ (on a warm host: once its plan is done)
#   bash /tmp/gpu-job/gpu_job.sh wait SECONDS       each later call, within 30 s of the last
# (GPU_JOB_DIR moves /tmp/gpu-job.)
# Prefer SECONDS near 290 to the 560 a call allows: a call that ends while no turn is ready to
# send the next `wait` within 30 s loses the host and the plan's tail (calls of 547 s lost it
# where calls of 290 s ran back to back: benchmark/README.md, "Why each measurement").
#
# `start` installs the kit (.gpu/wheels, shared/gpu/README.md) into /tmp/site and this checkout
# into /tmp/plugin, copies the checkout to /tmp/gpu-job/repo (later calls may replace the working
# tree the host was given), runs PLAN there in the background and waits; `wait` waits again. Both
# return after SECONDS or once PLAN is done, and leave in $OUT what the phases wrote so far
# (results.tgz, plus the sweeps' level traces under 15 MB each): what a call was cut short in
# comes back with the next one.
#
# FlashInfer: the kit's flashinfer wheel lacks the vendored CCCL its JIT builds need, and the
# builds cost a fresh host minutes. So the kit carries the kernels, built on a CPU host (no GPU
# needed; 14 minutes on 2 cores):
#   python benchmark/flashinfer_kernels.py build .gpu/flashinfer-aot.tar.xz --shapes 1b 8b
# `start` installs them as FlashInfer's AOT ones, and flashinfer_has_kernels runs them once
# before a plan uses them. Where they fail, carry the 1cccl wheel in place of the 1slim one
#   python3 ../shared/gpu/repack_wheel.py flashinfer_python-0.6.15.post1-py3-none-any.whl \
#     .gpu/wheels --build-tag 1cccl --drop flashinfer/data/cutlass/examples/ \
#     --drop flashinfer/data/cutlass/test/ --drop flashinfer/data/cutlass/python/
# and no archive beside it (the two pass the 64 MiB a call carries): the servers build them.
# What a host's JIT built (such as FlashInfer's sampling module, which builds without the CCCL)
# comes back as $OUT/flashinfer-aot.tar.xz, with the kernels the call carried.
#
# FA3 (SGLang's default attention backend on Hopper): the kit's sgl-kernel wheel drops its FA3
# library (1.1 GB). The kit carries the part of it the model pair's shapes run, built on a CPU
# host (no GPU needed; 8 minutes on 2 cores, 0.5 MB packed):
#   python benchmark/fa3_kernels.py build .gpu/fa3-ops.tar.xz --shapes 1b 8b
# `start` installs it as sgl_kernel's flash_ops, and fa3_has_kernels runs it once before a plan
# serves with `--attention-backend fa3`.
#
# PLAN is a bash file sourced from the repository copy; it calls these, in order:
#   phase NAME COMMAND...            COMMAND's output to $RESULTS/NAME.log, its time and status
#                                    to job.log; returns its status
#   gpu_tests BACKEND SHAPE EXPR [LABEL]   test/gpu -k EXPR (env SPECGATE_GPU_*) into
#                                    $RESULTS/tests-BACKEND-SHAPE[-LABEL], the servers' logs
#                                    reduced to their decode, prefill, switch and gate lines
#                                    and their start-up's graph captures and KV pool
#   keep_lines DIR                   the same reduction for a sweep's logs/
#   flashinfer_has_kernels SHAPE     whether FlashInfer can load or build that model shape's kernels,
#                                    and if not why, in job.log (gpu_tests checks it for itself)
#   fa3_has_kernels SHAPE            the same for FA3's carried kernels
#   log MESSAGE                      MESSAGE to job.log
# and writes what it wants back under $RESULTS.
set -u
JOB=${GPU_JOB_DIR:-/tmp/gpu-job}
RESULTS=$JOB/results
REPO=$JOB/repo
FLASHINFER_AOT=/tmp/site/flashinfer/data/aot  # where FlashInfer looks for prebuilt kernels
export PYTHONPATH=/tmp/site:/tmp/plugin PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  SGLANG_ENABLE_JIT_DEEPGEMM=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 PATH=/tmp/site/bin:$PATH

log() { echo "[$(date +%T)] $*" | tee -a "$RESULTS/job.log"; }

phase() {  # returns COMMAND's status, so that a plan can run a control only after a failure
  local name=$1 t0 status; shift
  t0=$(date +%s); log "start $name"
  "$@" > "$RESULTS/$name.log" 2>&1
  status=$?
  log "end $name: exit $status after $(( $(date +%s) - t0 )) s"
  return $status
}

keep_lines() {
  local f
  for f in "$1"/server-*.log; do
    [ -f "$f" ] || continue
    # With the start-up's costs: each CUDA graph's capture, the off state's build (upstream's
    # "Built adaptive runtime state steps=0": what the fast path costs at start-up) and the KV pool.
    grep -E "Decode batch|Prefill batch|Switch adaptive|spec gate|Error|Traceback|graph end|Built adaptive|Memory pool end" \
      "$f" > "${f%.log}-lines.txt"
    tail -40 "$f" > "${f%.log}-tail.txt"
    rm -f "$f"
  done
}

flashinfer_has_kernels() {  # SHAPE (model_pair.py's): can FlashInfer load or build its attention kernels?
  # The 1slim wheel drops the vendored CCCL its JIT builds need; the carried archive holds what
  # flashinfer_kernels.py built. Without either, every server fails its start after its first
  # forward, minutes into a plan. So the carried kernels run once
  # (about 15 s, once a plan: job.log keeps the verdict); where they fail, job.log says why for
  # the caller, which then runs nothing.
  [ -d /tmp/site/flashinfer/data/cccl ] && return 0
  grep -q "^FlashInfer kernels for $1 pass" "$RESULTS/job.log" && return 0
  python3 benchmark/flashinfer_kernels.py probe "$1" >> "$RESULTS/job.log" 2>&1 && return 0
  log "not run: FlashInfer can neither load nor build the $1 pair's kernels (carry the 1cccl wheel)"
  return 1
}

fa3_has_kernels() {  # SHAPE (model_pair.py's): can SGLang's FA3 backend run its attention here?
  # Without the carried archive (fa3_kernels.py) sgl_kernel has no flash_ops, and a server with
  # --attention-backend fa3 fails its start; with it, the shapes it was built for run. So its ops
  # run once against PyTorch (seconds, once a plan: job.log keeps the verdict); where they fail,
  # job.log says why for the caller, which then runs nothing.
  grep -q "^FA3 kernels for $1 pass" "$RESULTS/job.log" && return 0
  python3 benchmark/fa3_kernels.py probe "$1" >> "$RESULTS/job.log" 2>&1 && return 0
  log "not run: no FA3 kernels for the $1 pair here (carry .gpu/fa3-ops.tar.xz built for it)"
  return 1
}

gpu_tests() {
  if [ "$1" = flashinfer ] && ! flashinfer_has_kernels "$2"; then
    return 1
  fi
  if [ "$1" = fa3 ] && ! fa3_has_kernels "$2"; then
    return 1
  fi
  local dir="$RESULTS/tests-$1-$2${4:+-$4}"
  mkdir -p "$dir"
  SPECGATE_REQUIRE_GPU=1 SPECGATE_GPU_ATTENTION_BACKEND=$1 SPECGATE_GPU_SHAPE=$2 SPECGATE_GPU_LOGS=$dir \
    python3 -m pytest test/gpu -m gpu -q -rs -s -p no:cacheprovider -k "$3" --basetemp "$JOB/pytest"
  local status=$?
  rm -rf "$JOB/pytest"  # the generated models: two 8B pairs fill the host's disk
  keep_lines "$dir"
  return $status
}

pack_flashinfer_kernels() {  # the carried kernels and FlashInfer's JIT builds, as its AOT directory
  local built=("${HOME:-}"/.cache/flashinfer/*/*/cached_ops) archive=$JOB/flashinfer-aot.tar.xz
  local kernels=$JOB/flashinfer-kernels dir
  [ -d "${built[0]}" ] || return 0
  # xz takes about 5 s of the 20 s a call leaves to pack: again only once the JIT built more.
  if [ ! -f "$archive" ] || [ -n "$(find "${built[0]}" -name '*.so' -newer "$archive")" ]; then
    # The carried kernels too: an archive of this host's builds alone, put in .gpu, lost the 1B
    # pair's kernels to a host that built the 8B pair's.
    rm -rf "$kernels" && mkdir -p "$kernels"
    for dir in "$FLASHINFER_AOT" "${built[0]}"; do
      [ -d "$dir" ] && (cd "$dir" && cp --parents */*.so "$kernels"/ 2>/dev/null)
    done
    (cd "$kernels" && tar cJf "$archive" */*.so 2>/dev/null) || { rm -f "$archive"; return 0; }
  fi
  cp "$archive" "$OUT/"
}

pack() {
  rm -rf "${OUT:?}"/*
  tar czf "$OUT/results.tgz" -C "$JOB" --exclude='*.trace.json.gz' results
  pack_flashinfer_kernels
  find /tmp/specgate-sweep-* "$RESULTS" -name '*.trace.json.gz' -size -15M 2>/dev/null | head -6 | while read -r t; do
    cp "$t" "$OUT/$(basename "$(dirname "$t")")-$(basename "$t" | tr -c 'A-Za-z0-9._\n-' _)"
  done
}

wait_for_plan() {
  local until=$(( $(date +%s) + $1 - 20 ))  # 20 s to pack
  while [ "$(date +%s)" -lt "$until" ] && [ ! -f "$RESULTS/PLAN_DONE" ]; do sleep 5; done
  tail -20 "$RESULTS/job.log"
  pack
}

case ${1:-} in
  start)
    plan=$(realpath "$2")
    # A host still warm from an earlier call: its plan's results came back with that call.
    if [ -d "$RESULTS" ] && [ ! -f "$RESULTS/PLAN_DONE" ]; then
      echo "a plan is still running here: bash $JOB/gpu_job.sh wait SECONDS" >&2; exit 1
    fi
    if ! compgen -G ".gpu/wheels/*.whl" > /dev/null; then
      echo "no GPU kit in .gpu/wheels: build it (shared/gpu/README.md) and carry .gpu, which git ignores" >&2; exit 1
    fi
    rm -rf "$RESULTS" && mkdir -p "$RESULTS"
    # A failed install leaves no results folder, which the next start would take for a running plan.
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels/*.whl \
      && python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/plugin . \
      || { rm -rf "$RESULTS"; exit 1; }
    # Kernels a FlashInfer server would otherwise build at its first start (minutes on a fresh
    # host, and only with the vendored CCCL the kit drops): flashinfer_kernels.py's build.
    if [ -f .gpu/flashinfer-aot.tar.xz ]; then
      mkdir -p "$FLASHINFER_AOT" && tar xJf .gpu/flashinfer-aot.tar.xz -C "$FLASHINFER_AOT"
    fi
    # The FA3 library the kit's sgl-kernel wheel drops, for the pair's shapes: fa3_kernels.py's build.
    if [ -f .gpu/fa3-ops.tar.xz ]; then
      tar xJf .gpu/fa3-ops.tar.xz -C /tmp/site/sgl_kernel
    fi
    rm -rf "$REPO" && mkdir -p "$REPO" && cp -r benchmark test python pyproject.toml README.md "$REPO"/
    cp "$plan" "$JOB/plan.sh" && cp "$0" "$JOB/gpu_job.sh"
    nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv > "$RESULTS/gpu.csv"
    log "installed; plan $2"
    (cd "$REPO" && setsid bash "$JOB/gpu_job.sh" run > "$JOB/run.out" 2>&1 < /dev/null &)
    wait_for_plan "$3" ;;
  run)
    nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw --format=csv -l 5 > "$RESULTS/gpu-clocks.csv" 2>&1 &
    clocks=$!
    # shellcheck source=/dev/null
    source "$JOB/plan.sh"
    kill $clocks 2>/dev/null
    touch "$RESULTS/PLAN_DONE"; log "plan done" ;;
  wait) wait_for_plan "$2" ;;
  *) sed -n 2,23p "$0"; exit 2 ;;
esac
