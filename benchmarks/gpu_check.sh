#!/usr/bin/env bash
# A prepared accelerator check (one GPU, under 8 minutes). Run from the repository root:
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]             # on a GPU machine (default OUT_DIR gpu_check)
#     bash benchmarks/gpu_check.sh OUT_DIR --cpu-smoke   # tiny sizes: that every part runs, on any CPU
#
# Parts (each under its own time limit, so one slow part cannot eat the others' time):
#   1. the full Figure 2 sweep, `catsim sweep` with its defaults (N = 2..131072, γ ∈ {0, 1}, 4 seeds);
#   2. benchmarks/gpu_check.py: a Qwen2.5-0.5B-shaped model, one RL step's work at a realistic
#      length (8 prompts × 8 samples × 1024 new tokens): rollout tok/s, RL step time, peak device
#      memory, and `catsim llm plan`'s per-device estimate of the same step against it;
#   3. `catsim llm plan` tables of that step (and 1 × 8192 tokens) as a user would ask for them;
#   4. benchmarks/gpu_rollout.py: the RL rollout at the paper's shape (Qwen2.5-0.5B and 1.5B shapes,
#      64 prompts × 8 samples, up to 2048 new tokens, skewed lengths), cascade and static engines,
#      each beside the HBM roofline of the same work (weights + KV bytes per step ÷ bandwidth).
#   5. the Maze study's `paper` preset: wall time per 100 RL steps (benchmarks/bench_maze_study_step.py).
# Writes OUT_DIR/summary.txt (all parts' results) next to each part's own output and log.
set -uo pipefail

OUT=gpu_check
SMOKE=""
for arg in "$@"; do
  case "$arg" in
    --cpu-smoke) SMOKE="--cpu-smoke" ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $arg" >&2; exit 2 ;;
    *) OUT="$arg" ;;
  esac
done
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
PY=${PYTHON:-python}

# time limits (seconds) sized for one GPU; a CPU smoke run compiles slowly, so it gets more
if [ -n "$SMOKE" ]; then SCALE=10; else SCALE=1; fi

note() { echo "$*" | tee -a "$SUMMARY"; }

# run NAME SECONDS CMD...: run a part under a time limit, log it, record its status and wall time
run() {
  local name=$1 limit=$(($2 * SCALE)); shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local status=ok
  if [ $rc -eq 124 ]; then status="TIMED OUT after ${limit}s"; elif [ $rc -ne 0 ]; then status="FAILED (exit $rc)"; fi
  note "[$name] $status, $((SECONDS - t0)) s  (log: $OUT/$name.log)"
  return 0
}

note "catsim accelerator check $(date -u +%Y-%m-%dT%H:%M:%SZ) ${SMOKE:+(cpu smoke)}"
note "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi > /dev/null; then
  note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
fi
note "jax: $($PY -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tail -1)"

# 1. the Figure 2 sweep
if [ -n "$SMOKE" ]; then
  SWEEP_ARGS=(--group-size 2,4 --seeds 1 --steps 10 --num-actions 64 --num-correct 4)
else
  SWEEP_ARGS=()
fi
run sweep 240 $PY -m catsim sweep --out "$OUT/sweep" --figures "$OUT/figures" --no-resume \
  --no-progress "${SWEEP_ARGS[@]}"
if [ -f "$OUT/sweep/table.txt" ]; then cat "$OUT/sweep/table.txt" >> "$SUMMARY"; fi
grep -E "wall time|regimes" "$OUT/sweep.log" | tail -3 >> "$SUMMARY"

# 2. rollout and RL step of the 0.5B shape, peak memory against the plan
run llm_check 200 $PY benchmarks/gpu_check.py --out "$OUT" $SMOKE
grep -E "^(rollout|RL step|peak|.*parameters)" "$OUT/llm_check.log" >> "$SUMMARY"

# 3. the plan's tables, as `catsim llm plan` prints them
CONFIG="$OUT/qwen25-05b.json"
$PY -c "import json, sys; sys.path.insert(0, 'benchmarks'); from gpu_check import QWEN25_05B, SMOKE; \
cfg = {**QWEN25_05B, **(SMOKE if '$SMOKE' else {})}; json.dump(cfg, open('$CONFIG', 'w'))"
if [ -n "$SMOKE" ]; then SHAPES=("4 16 2" "1 64 1"); else SHAPES=("64 1152 8" "1 8192 1"); fi
for shape in "${SHAPES[@]}"; do
  read -r batch seq micro <<< "$shape"
  run "plan_${batch}x${seq}" 60 $PY -m catsim llm plan --model "$CONFIG" --batch "$batch" --seq "$seq" \
    --micro-batch-size "$micro" --remat --dtype bfloat16
  cat "$OUT/plan_${batch}x${seq}.log" >> "$SUMMARY"
done

# 4. the rollout at the paper's shape against its HBM roofline
run rollout 150 $PY benchmarks/gpu_rollout.py --out "$OUT" $SMOKE
grep -E "^rollout " "$OUT/rollout.log" >> "$SUMMARY"
# ---- 5. Maze study, `paper` preset (App. K): wall time per 100 RL steps ------------------------
maze_study_step() {
  run maze_study_step 150 $PY benchmarks/bench_maze_study_step.py --out "$OUT/maze_study_step" $SMOKE
  grep -E "^maze study|^\{" "$OUT/maze_study_step.log" >> "$SUMMARY"
}
maze_study_step
# ---- end of the Maze study part -----------------------------------------------------------------
note "total $SECONDS s"
