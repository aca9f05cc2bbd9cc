#!/usr/bin/env bash
# Where the step of 4 ranks on 2 cores goes (docs/scaling.md). Run from the repository root after
# scripts/setup.sh, on an otherwise idle machine; writes into $OUT (default /tmp/oversubscribed).
set -u
HERE=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp/oversubscribed}; PY=${PY:-.venv/bin/python}
D5=${D5:-.venv/bin/deep500lite}; MPIEXEC=${MPIEXEC:-.venv/bin/mpiexec}
export OMP_NUM_THREADS=1
rm -rf "$OUT"; mkdir -p "$OUT/waits"
lscpu | grep "Model name"; date -u
# 1. the job, each rank's waits recorded
D5X_WAITS_DIR="$OUT/waits" PYTHONPATH="$HERE/waits" $D5 run digits_mlp_distributed -n 4 --set epochs=10 \
    --no-baseline --out "$OUT/job4" > "$OUT/job4.txt" 2>&1
grep "slowest rank" "$OUT/job4.txt"; $PY "$HERE/analyze.py" waits "$OUT/waits"
# 2. the 1-rank recipe alone on core 0, then two copies taking turns step by step on core 0 (a pipe
#    passes the turn), then two such pairs, one per core
run1() { taskset -c "$1" $D5 run digits_mlp_distributed --set epochs=10 --out "$2" > "$2.txt" 2>&1; }
pair() {  # pair CORE NAME
    local d="$OUT/$2"; mkdir -p "$d"; mkfifo "$d/a2b" "$d/b2a"
    ( exec 3<>"$d/b2a"; printf x >&3; sleep 120 ) & local seed=$!
    D5X_IN="$d/b2a" D5X_OUT="$d/a2b" PYTHONPATH="$HERE/token" run1 "$1" "$d/A" & local a=$!
    D5X_IN="$d/a2b" D5X_OUT="$d/b2a" PYTHONPATH="$HERE/token" run1 "$1" "$d/B" & local b=$!
    wait $a $b; kill $seed 2>/dev/null
}
run1 0 "$OUT/alone"
pair 0 pair
pair 0 pairs-core0 & pair 1 pairs-core1 & wait
$PY "$HERE/analyze.py" steps "$OUT/alone/results.json" "$OUT"/pair/{A,B}/results.json "$OUT"/pairs-core{0,1}/{A,B}/results.json
# 3. bare loops of work and allreduce on 4 ranks, and the torch work on 1 rank
$MPIEXEC -n 4 $PY "$HERE/loop.py" spin 420
$MPIEXEC -n 4 $PY "$HERE/loop.py" torch 3
$MPIEXEC -n 1 $PY "$HERE/loop.py" torch 3
date -u
