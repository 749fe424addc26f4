# What the gate costs on FA3, SGLang's default attention backend on Hopper (issue 63, item 2),
# where its fast off path does not reach and off steps run upstream's steps-0 state. The four
# servers side by side (sweep.py --interleave), each round's order alternating: plain, always-on
# EAGLE-3 (spec), upstream's hard gate and this gate at the same N = 9, 8B pair of accept length
# 2.2, at FA3_LEVELS (default 16,32,64,128), FA3_REPEATS runs a level (default 2) of
# FA3_PROMPTS_PER_C x C prompts each (default 4) after a warm-up at the last level, traced at
# FA3_PROFILE_LEVEL where set (200 steps, the host recorded: the decode step of each off path);
# then the GPU tests FA3_TESTS selects (pytest -k, commas for "or") on FA3 with the 1B pair:
# by default greedy identity and the KV-probe re-enable. FA3_PARTS (default sweep,tests)
# says which of the two to run.
# Needs the carried kernels, .gpu/fa3-ops.tar.xz (gpu_job.sh: FA3), which fa3_has_kernels runs
# once first; without them the plan runs nothing and job.log says why. Four 8B servers resident
# take ~60 GB of weights: on an H100 each would keep ~1.5 GB of KV, too little for C = 128, so
# ask for an H200 (run's needs_h200).
# At the defaults, about 22 device minutes for the sweep (36 runs and four server starts;
# interleaved_ab.sh's 26 runs of two servers took 12), 3 more for a traced level and 6 for the
# tests, with a minute for the pair and the kernels' probe: more than a session's 30. So two
# sessions of about 20 minutes each, the levels split between them (each level's servers still
# side by side on one host), the tests after the first half:
#   FA3_LEVELS=16,32 bash benchmark/gpu_job.sh start benchmark/plans/fa3.sh 290
#   FA3_PARTS=sweep FA3_LEVELS=64,128 FA3_PROFILE_LEVEL=128 bash benchmark/gpu_job.sh start benchmark/plans/fa3.sh 290
# On an H100, two servers at a time (FA3_CONFIGS, default all four): gate,plain first, the
# question item 3 turns on (does the off path cost plain more than 2 %), in about 14 minutes
# with the tests at FA3_REPEATS=2; spec,upstream-gate in another session.
# each followed by `bash /tmp/gpu-job/gpu_job.sh wait 290` calls until the plan is done.
# Ran (b6492eb, H100): FA3_CONFIGS=gate,plain FA3_REPEATS=2 with the two tests
# (results/2026-12-07-fa3-gate-plain-8b-2.2-h100), then FA3_PARTS=sweep
# FA3_CONFIGS=upstream-gate,spec FA3_LEVELS=16,64 (results/2026-12-07-fa3-spec-upstream-gate-8b-2.2-h100).
# Item 3, FA3's own decode path for the off state (one_token_decode.py): on by default since it
# ran here; FA3_OFF_PATH=0 sets SGLANG_SPEC_GATE_FA3_OFF_PATH=0 for every server and test, the
# gate then on upstream's steps-0 kernels, as in the runs above (the sweep writes to fa3-ab, else
# to fa3-ab-fast-path). Ran (b4e258b, H100) with FA3_CONFIGS=gate,plain FA3_REPEATS=2 and four
# tests (results/2026-12-07-fa3-fast-path-eager-draft-extend-8b-2.2-h100): the off state's draft
# extend had no graph on FA3 (upstream lists none), fixed in 35cbb83. Then (1eef06f, H100, the
# switch still set by hand) the A/B with a traced level and the four tests
# (results/2026-12-07-fa3-fast-path-8b-2.2-h100), and upstream's steps-0 off path traced beside
# plain (results/2026-12-07-fa3-upstream-off-path-profile-8b-2.2-h100):
#   FA3_CONFIGS=gate,plain FA3_REPEATS=2 FA3_PROFILE_LEVEL=64 \
#     FA3_TESTS=greedy_outputs_identical,reenable_is_warm,gate_switched,prompts_prefilled \
#     bash benchmark/gpu_job.sh start benchmark/plans/fa3.sh 290
#   FA3_OFF_PATH=0 FA3_PARTS=sweep FA3_CONFIGS=upstream-gate,plain FA3_LEVELS=64 FA3_REPEATS=1 \
#     FA3_PROFILE_LEVEL=64 bash benchmark/gpu_job.sh start benchmark/plans/fa3.sh 290
export SGLANG_SPEC_GATE_FA3_OFF_PATH=${FA3_OFF_PATH:-1}
run=fa3-ab$([ "$SGLANG_SPEC_GATE_FA3_OFF_PATH" = 0 ] || echo -fast-path)
parts=${FA3_PARTS:-sweep,tests} levels=${FA3_LEVELS:-16,32,64,128}
tests=${FA3_TESTS:-greedy_outputs_identical,reenable_is_warm}
if [[ $parts == *sweep* ]] && fa3_has_kernels 8b; then
  phase pair python3 benchmark/model_pair.py /tmp/p8 --shape 8b --accept-length 2.2 --seed 0 --device cuda
  phase "$run" python3 benchmark/sweep.py --interleave --run-dir "$RESULTS/$run" \
    --model-path /tmp/p8/target --draft-model-path /tmp/p8/draft --thresholds 9 --scenarios closed \
    --configs "${FA3_CONFIGS:-gate,upstream-gate,spec,plain}" --concurrency "$levels" \
    --prompts-per-concurrency "${FA3_PROMPTS_PER_C:-4}" --repeat-levels "${FA3_REPEATS:-2}" \
    --warm-up-level "${levels##*,}" --output-len 256 --output-len-spread 0.5 \
    ${FA3_PROFILE_LEVEL:+--profile-level "$FA3_PROFILE_LEVEL" --profile-steps 200 --profile-host} \
    -- --attention-backend fa3 --sampling-backend pytorch --grammar-backend none
  keep_lines "$RESULTS/$run/logs"
fi
if [[ $parts == *tests* ]]; then
  SPECGATE_GPU_BURSTS=3 phase tests gpu_tests fa3 1b "${tests//,/ or }"
fi
