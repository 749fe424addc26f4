#!/usr/bin/env bash
set -u
export SHAPE=1b OLEN=256 ILEN=512
bash .gpu/serve_and_bench.sh setup || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site --upgrade . 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 SGLANG_ENABLE_JIT_DEEPGEMM=0 NCCL_NVLS_ENABLE=0
COMMON="--max-running-requests 128 --cuda-graph-max-bs 128"
SPEC="--speculative-algorithm EAGLE3 --speculative-draft-model-path /tmp/models/draft --speculative-draft-load-format dummy --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
( while sleep 10; do curl -s -m 5 127.0.0.1:30000/server_info >> $OUT/info.jsonl 2>/dev/null && echo >> $OUT/info.jsonl; done ) &
poller=$!
LOGLEVEL=info CONCS="${GCONCS:-2 16 64}" bash .gpu/serve_and_bench.sh run gate8 $COMMON $SPEC --speculative-disable-batch-threshold 8 || { kill $poller; exit 1; }
kill $poller
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/info.jsonl") if l.strip().startswith("{")]
for r in rows[-2:]:
    s = r["internal_states"][0]
    print(json.dumps(s.get("spec_gate")), json.dumps(s.get("memory_usage")), s.get("startup_time"))
PY
grep -a -E "spec gate|Built adaptive|Switch adaptive|Traceback" $OUT/server-gate8.log | head -12
grep -a -c "Switch adaptive" $OUT/server-gate8.log
[ -n "${WITH_PLAIN:-}" ] && CONCS="16 64" bash .gpu/serve_and_bench.sh run plain $COMMON
rm -f $OUT/bench-*.log
