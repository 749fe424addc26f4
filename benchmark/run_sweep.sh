#!/usr/bin/env bash
# The benchmark suite in one command: sweep.py, then report.py and find_threshold.py on its results.
#
#   benchmark/run_sweep.sh [--quick] [sweep.py options ...] [-- launch_server flags ...]
#
# --quick  a smoke run for CI: plain, always-on and gate N=4 at concurrency 1 and 16, 32-token
#          outputs, a 20 s bursty scenario whose second half (64 req/s) keeps the decode batch
#          above 4 (two to three minutes per server, most of it server start-up).
#          Without it: every configuration at the sweep's defaults (the gates at the N that
#          find_threshold.py suggests from the plain and spec rows).
# Options after the preset override it (e.g. --thresholds 8,16).
# Env: MODEL, DRAFT  target and draft model paths (default /tmp/models/target, /tmp/models/draft)
#      RUN           results directory (default benchmark/results/<date>-quick or -full)
#      PYTHON        interpreter (default python3)
# Exit status: non-zero if a server, a level, the report or find_threshold failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PYTHON=${PYTHON:-python3}
# shellcheck disable=SC2054  # the commas separate sweep.py's list values, not array elements
if [ "${1:-}" = "--quick" ]; then
  shift
  name=quick
  preset=(--configs plain,spec,gate --thresholds 4 --concurrency 1,16 --output-len 32
          --prompts-per-concurrency 4 --min-prompts 8 --rows 1024 --bursty-phases 2:10,64:10)
else
  name=full
  preset=(--configs plain,spec,upstream-gate,gate)
fi
RUN=${RUN:-benchmark/results/$(date +%F)-$name}

"$PYTHON" benchmark/sweep.py --model-path "${MODEL:-/tmp/models/target}" \
  --draft-model-path "${DRAFT:-/tmp/models/draft}" --run-dir "$RUN" "${preset[@]}" "$@"
status=$?
"$PYTHON" benchmark/report.py "$RUN" || status=1
"$PYTHON" benchmark/find_threshold.py "$RUN" || status=1
exit $status
